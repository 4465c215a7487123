"""Guess-the-number: finding the number, plus credit for using the hints.

    reward = (1 - p - c) * success + c * consistent_fraction + p * valid_fraction

- success: the number was found within the turn limit (a policy that ignores
  the higher/lower hints runs out of guesses; one that binary-searches does not);
- consistent_fraction: the share of turns whose guess lay inside the range the
  earlier hints still allowed (the env counts them). Success alone credits all
  turns of an episode alike; this term credits each hint-respecting guess,
  which is what makes the skill learnable in tens of steps, not hundreds. It
  cannot be gamed apart from the task: consistent guesses shrink the range, so
  they are the road to success, and the success term still dominates;
- valid_fraction: the share of turns with a parseable number in range.
Summary keys used: success, num_turns, num_invalid, format_penalty, info.consistent_guesses.
"""

import json

CONSISTENCY_WEIGHT = 0.2


def reward(summary: dict) -> float:
    p = float(summary.get("format_penalty", 0.1))
    c = CONSISTENCY_WEIGHT
    turns = max(1, int(summary["num_turns"]))
    valid_fraction = 1.0 - int(summary["num_invalid"]) / turns
    consistent_fraction = min(1.0, _consistent(summary.get("info")) / turns)
    return (1.0 - p - c) * float(bool(summary["success"])) + c * consistent_fraction + p * valid_fraction


def _consistent(info) -> int:
    try:  # an env without the key (or a custom one with junk in it) earns no consistency credit
        return max(0, int((info or {}).get("consistent_guesses", 0)))
    except (AttributeError, TypeError, ValueError):  # AttributeError: info that is not a dict
        return 0


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
