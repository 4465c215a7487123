"""Guess-the-number: 1 for finding the number within the turn limit, shaped like frozenlake's.

reward = (1 - p) * success + p * valid_fraction. The turn limit already makes
speed matter: a policy that ignores the higher/lower feedback runs out of
guesses; one that binary-searches does not.
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
