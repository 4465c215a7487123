"""FrozenLake: 1 for reaching the goal, shaped by the share of well-formed replies.

reward = (1 - p) * success + p * valid_fraction, with p the task's format
penalty: success dominates (0.9 of the scale by default) while a policy that
never writes a legal move still gets a gradient towards writing one.
Summary keys used: success, num_turns, num_invalid, format_penalty.
"""

import json


def reward(summary: dict) -> float:
    p = float(summary.get("format_penalty", 0.1))
    turns = max(1, int(summary["num_turns"]))
    valid_fraction = 1.0 - int(summary["num_invalid"]) / turns
    return (1.0 - p) * float(bool(summary["success"])) + p * valid_fraction


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
