"""FrozenLake: reaching the goal, plus credit for getting closer to it.

    reward = (1 - p - c) * success + c * progress + p * valid_fraction

- success: the goal was reached within the turn limit;
- progress: the share of the start's distance to the goal that the episode
  covered by its end, 0 if it ended in a hole (the env reports it). Without
  it, the only credit before a first success is the format term, which
  walking into the hole with two clean moves or bumping into a wall for
  every turn maxes out just as well; on-policy runs then sometimes learned
  the format with no episode ever at the goal, every member of every group
  scored alike and GRPO had no gradient left (its dead zone, seen in about
  1 run of 6). This term ranks those episodes by how close they came. It
  cannot be gamed apart from the task: short of the goal it is worth at most
  c x (1 - 1/start distance), 0.075 on the 3x3 map, and success dominates;
- valid_fraction: the share of turns with a parseable move (p: the task's
  format penalty).
Summary keys used: success, num_turns, num_invalid, format_penalty, info.progress.
"""

import json

PROGRESS_WEIGHT = 0.1


def reward(summary: dict) -> float:
    p = float(summary.get("format_penalty", 0.1))
    c = PROGRESS_WEIGHT
    turns = max(1, int(summary["num_turns"]))
    valid_fraction = 1.0 - int(summary["num_invalid"]) / turns
    success = bool(summary["success"])
    progress = 1.0 if success else _progress(summary.get("info"))
    return (1.0 - p - c) * float(success) + c * progress + p * valid_fraction


def _progress(info) -> float:
    try:  # an env without the key (or a custom one with junk in it) earns no progress credit
        value = float((info or {}).get("progress", 0.0))
    except (AttributeError, TypeError, ValueError):  # AttributeError: info that is not a dict
        return 0.0
    return min(1.0, max(0.0, value)) if value == value else 0.0


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
