"""`roll-agentic reward check MODULE`: a reward module tried as a run's start would try it.

`env check` tries an env; a reward was tried only by starting `train`, which
builds the whole run first. This calls what a run calls -- serverless: the module's
`reward(summary)` and `handler(event, context)`; `--local`: its handler
where it has one, else `reward(summary)` -- on the summary of a real
one-turn episode of an env (`--env`, FrozenLake by default), with the
checks and messages the start uses (`rollout/task_check.py`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

DEFAULT_ENV = "envs.frozenlake:FrozenLakeText"


def _cmd_check(args: argparse.Namespace) -> int:
    from roll_agentic.arg_types import json_object
    from roll_agentic.config import TaskConfig
    from roll_agentic.reward.local import has_handler
    from roll_agentic.reward.reward_ref import module_name, syntax_problem
    from roll_agentic.rollout.task_check import task_problem

    problem = syntax_problem(args.module)
    if problem:
        print(f"FAIL reward {args.module!r}: expected {problem}", file=sys.stderr)
        return 1
    try:
        kwargs = json_object("--kwargs", args.kwargs)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    task = TaskConfig(name="check", env_id=args.env, env_kwargs=kwargs, reward=args.module)
    mode = "local" if args.local else "serverless"
    problem = task_problem([task], mode)
    if problem:
        print(f"FAIL {problem.removeprefix('tasks[0] (check): ')}", file=sys.stderr)
        return 1
    if args.local:  # what reward=local runs call (`reward.local.scoring_call`)
        calls = "handler(event, context)" if has_handler(importlib.import_module(module_name(args.module))) else "reward(summary)"
    else:
        calls = "reward(summary) and handler(event, context)"
    print(f"PASS reward {args.module!r}: {calls} scored a one-turn episode of {args.env}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("reward", help="reward module utilities")
    sub = p.add_subparsers(dest="reward_command", required=True)
    c = sub.add_parser("check", help="call a reward module on a real episode's summary, as a run's start does")
    c.add_argument("module", help="as a task's `reward` names it: frozenlake (rewards/frozenlake.py), my_pkg.my_reward")
    c.add_argument("--env", default=DEFAULT_ENV,
                   help="the env whose one-turn episode is scored, a gymnasium id or module:Class (default: %(default)s)")
    c.add_argument("--kwargs", default="", help="the env's kwargs as a JSON object (default: none)")
    c.add_argument("--local", action="store_true",
                   help="check what reward=local runs call: the handler where the module has one, else "
                        "reward(summary) (default: both, as a serverless run's start does)")
    c.set_defaults(func=_cmd_check)
