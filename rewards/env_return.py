"""Any gymnasium env: the episode's return, less the format penalty.

reward = env_return - format_penalty * num_invalid. Not bounded: GRPO
normalises within each group, so the scale of the env's reward does not matter,
but its scale against format_penalty does. An unparseable reply does not step
the env, so it never pays the env's cost of a step: in an env that charges
every step (CliffWalking: -1 a move), a penalty below that cost makes replying
garbage outscore every move, and the policy learns garbage. Set the task's
format_penalty above the env's largest cost of one step (any number >= 0 is
accepted for this reward).
"""

import json


def reward(summary: dict) -> float:
    penalty = float(summary.get("format_penalty", 0.1)) * int(summary.get("num_invalid", 0))
    return float(summary["env_return"]) - penalty


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
