"""A run's tasks checked before anything starts: each env builds, each reward module exists.

Without this a typo in `env_id` or `reward` surfaced minutes into a run:
every episode failed, the buffer waited out its five minutes of failures
(a restarting service is not broken), and the run ended in a Ray traceback.
"""

from __future__ import annotations

import importlib.util

from roll_agentic.config import TaskConfig


def task_problem(tasks: list[TaskConfig]) -> str:
    """What is wrong with the first task that cannot run, in one line; "" if none."""
    from envs.registry import make_text_env

    built: set[str] = set()
    for i, task in enumerate(tasks):
        where = f"tasks[{i}] ({task.name})"
        key = repr((task.env_id, sorted(task.env_kwargs.items())))
        if key not in built:
            try:
                env = make_text_env(task.env_id, task.env_kwargs)
            except Exception as err:  # noqa: BLE001 - any failure of the user's env is reported as such
                return f"{where}: {err}" if isinstance(err, ValueError) else (
                    f"{where}: env_id {task.env_id!r} failed to build: {type(err).__name__}: {err}")
            env.close()
            built.add(key)
        try:
            found = importlib.util.find_spec(f"rewards.{task.reward}") is not None
        except ImportError:  # e.g. a dotted name whose first part is no package
            found = False
        if not found:
            return (f"{where}: reward {task.reward!r} is not a module in rewards/ "
                    f"(expected rewards/{task.reward}.py with reward(summary) and handler(event, context))")
    return ""


def check_tasks(tasks: list[TaskConfig]) -> None:
    """ValueError naming the first task that cannot run."""
    problem = task_problem(tasks)
    if problem:
        raise ValueError(problem)
