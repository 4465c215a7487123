"""Any gymnasium env: the episode's return, less the format penalty.

reward = env_return - format_penalty * num_invalid. Not bounded: GRPO
normalises within each group, so the scale of the env's reward does not matter.
"""

import json


def reward(summary: dict) -> float:
    penalty = float(summary.get("format_penalty", 0.1)) * int(summary.get("num_invalid", 0))
    return float(summary["env_return"]) - penalty


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
