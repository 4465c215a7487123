"""A reward with a bug the run's start check cannot see (tests/train/test_job_e2e.py):
it scores the check's one-turn summary (seed 0) and raises on every real episode."""

import json


def reward(summary: dict) -> float:
    if summary["seed"] == 0:
        return 0.0
    return float(summary["info"]["answer"])  # the bug: the env's info has no such key


def handler(event, context):
    return {"reward": reward(json.loads(event) if isinstance(event, str) else event)}
