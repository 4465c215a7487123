"""Guess-the-number: 1 for finding the number, shaped like frozenlake's.

Finding it in fewer guesses scores more: success counts (max_turns - turns + 1)
/ max_turns, so a binary search beats a lucky sweep.
Summary keys used: success, num_turns, max_turns, num_invalid, format_penalty.
"""

import json


def reward(summary: dict) -> float:
    p = float(summary.get("format_penalty", 0.1))
    turns = max(1, int(summary["num_turns"]))
    max_turns = max(turns, int(summary.get("max_turns", turns)))
    valid_fraction = 1.0 - int(summary["num_invalid"]) / turns
    speed = (max_turns - turns + 1) / max_turns
    return (1.0 - p) * float(bool(summary["success"])) * speed + p * valid_fraction


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
