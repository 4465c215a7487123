"""A run's tasks checked before anything starts: each env builds, resets and steps,
each reward module exists and scores that first turn.

Without this a typo in `env_id` or `reward` surfaced minutes into a run:
every episode failed, the buffer waited out its five minutes of failures
(a restarting service is not broken), and the run ended in a Ray traceback.
An env that builds but whose reset raises (or returns the old gym API's bare
observation), or a reward function with the wrong signature, failed the same
way: every episode or every reward, so they are checked here too. A reward
module is called as the run will call it (its handler, with a real context,
wherever the run would use it), and an env whose reset ignores its seed is
warned about (GRPO and evaluation take one seed for one episode).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import time
from collections.abc import Callable

from roll_agentic.config import TaskConfig
from roll_agentic.reward.local import has_handler, scoring_call
from roll_agentic.reward.outcome import parse_reward
from roll_agentic.reward.reward_ref import TopLevelModule, module_name, shown_as, source_file
from roll_agentic.rollout.env_contract import check_reset, check_step
from roll_agentic.rollout.trajectory import json_scalars

REWARD_CHECK_TIMEOUT_S = 30.0
# The limit a run puts on each env call (rollout.env_step_timeout_s, whose default this is):
# an env whose build, reset or step takes longer fails every episode of the run.
ENV_CHECK_TIMEOUT_S = 60.0

# What every episode of an untrained policy does first: a reply that names no action.
_UNPARSEABLE_REPLY = "???"


class _TooSlow(Exception):
    """An env call of the check did not return within the run's env call limit."""


def _bounded(fn: Callable[[], object], timeout_s: float) -> object:
    """fn() in a daemon thread: its result, its error raised, or _TooSlow past `timeout_s`."""
    result, error, finished = _call_in_thread(fn, timeout_s)
    if not finished:
        raise _TooSlow()
    if error is not None:
        raise error
    return result


def _env_problem(task: TaskConfig, timeout_s: float) -> tuple[str, dict]:
    """Why the task's env cannot run an episode's first turn ("" if it can), and the
    info of that turn, which the reward check below scores.

    Each call runs under the limit the run's worker puts on env calls: called here
    directly, an env whose reset hung (a simulator that never came up) held the start
    for ever, before anything said what it was waiting for."""
    from envs.registry import EnvSpecError, make_text_env

    def too_slow(call: str) -> str:
        return (f"env_id {task.env_id!r}: {call} did not return within {timeout_s:g}s, the limit a run puts on "
                "every env call (rollout.env_step_timeout_s), so every episode would fail; make it return "
                "sooner or raise that limit")

    try:
        env = _bounded(functools.partial(make_text_env, task.env_id, task.env_kwargs), timeout_s)
    except _TooSlow:
        return too_slow("building it"), {}
    except EnvSpecError as err:  # the registry's own message: it names the env and what to do
        return str(err), {}
    except Exception as err:  # noqa: BLE001 - the user's constructor raised: said so, as `env check` says it
        return f"constructing {task.env_id!r} raised {type(err).__name__}: {err}", {}
    call = "reset(seed=0)"
    hung = False
    try:
        first, _ = check_reset(_bounded(functools.partial(env.reset, seed=0), timeout_s))
        again, _ = check_reset(_bounded(functools.partial(env.reset, seed=0), timeout_s))
        if first != again:
            _warn_nondeterministic(task, first, again)
        call = "step(<a reply that names no action>)"
        _, reward, terminated, truncated, info = check_step(
            _bounded(functools.partial(env.step, _UNPARSEABLE_REPLY), timeout_s))
    except _TooSlow:
        hung = True
        return too_slow(call), {}
    except Exception as err:  # noqa: BLE001 - the env's own bug or a broken contract
        return (f"env_id {task.env_id!r}: {call} failed: {type(err).__name__}: {err} "
                f"(run `roll-agentic env check {task.env_id}` for every check)"), {}
    finally:
        # A failing close says nothing about training; after a hung call it may hang too
        # (a lock the stuck call holds), so it is then not waited for. A text env need not
        # subclass gym.Env, so it may have no close at all (the worker shrugs that off too).
        close = getattr(env, "close", None)
        if callable(close):
            _call_in_thread(close, 0.0 if hung else timeout_s)
    return "", {"env_return": float(reward), "terminated": bool(terminated), "truncated": bool(truncated),
                "info": json_scalars(info)}


# Envs (id and kwargs) whose nondeterministic reset was warned about: once per process, not
# once per task using the env or per job a multiplexer admits.
_WARNED_NONDETERMINISTIC: set[str] = set()


def _warn_nondeterministic(task: TaskConfig, first: str, again: str) -> None:
    """Two resets with seed 0 gave different observations: GRPO compares a group's episodes
    as if they were one episode replayed, and evaluation replays its seeds, so an env that
    ignores its seed trains on noise. A warning, not a refusal: no task key lets an env say
    it varies on purpose (envs/tail_turns.py draws each response's length per call)."""
    key = _env_key(task)
    if key in _WARNED_NONDETERMINISTIC:
        return
    _WARNED_NONDETERMINISTIC.add(key)
    print(f"warning: task {task.name!r}: env_id {task.env_id!r}: reset(seed=0) twice gave different "
          f"observations ({first!r:.40} then {again!r:.40}); GRPO groups and evaluation assume the same seed "
          "gives the same episode, so reset(seed=...) must be deterministic: call super().reset(seed=seed) "
          "and draw every random choice from self.np_random", file=sys.stderr)


def _env_key(task: TaskConfig) -> str:
    return repr((task.env_id, sorted(task.env_kwargs.items())))


def _sample_summary(task: TaskConfig, turn: dict) -> dict:
    """A summary as the worker sends it (Trajectory.summary) for a one-turn episode."""
    invalid = bool(turn["info"].get("invalid_action", False))
    return {"task": task.name, "seed": 0, "env_return": turn["env_return"],
            "success": bool(turn["info"].get("success", turn["terminated"] and turn["env_return"] > 0)),
            "terminated": turn["terminated"], "truncated": turn["truncated"], "num_turns": 1,
            "max_turns": task.max_turns, "num_invalid": int(invalid), "format_penalty": task.format_penalty,
            "responses": [_UNPARSEABLE_REPLY], "info": turn["info"]}


def _call_reward(fn, summary: dict) -> tuple[object, BaseException | None, bool]:
    """fn(summary) in a daemon thread: (result, error, finished in time). A slow or hung
    reward must not hold the start (nor, as a pool thread would, the exit)."""
    return _call_in_thread(functools.partial(fn, summary), REWARD_CHECK_TIMEOUT_S)


def _call_in_thread(fn: Callable[[], object], timeout_s: float) -> tuple[object, BaseException | None, bool]:
    """fn() in a daemon thread, waited for up to `timeout_s`: (result, error, finished in time)."""
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as err:  # noqa: BLE001 - reported
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True, name="task-check")
    thread.start()
    thread.join(timeout_s)
    return box.get("result"), box.get("error"), not thread.is_alive()


def _reward_problem(name: str, summary: dict, need_handler: bool = False) -> str:
    """Why the reward module `name` names cannot score a trajectory, or "". `need_handler`:
    the run invokes it as a Lambda function (reward.mode=serverless), through `handler`;
    otherwise it is called as LocalRewardClient calls it (its handler, where it has one)."""
    file = shown_as(name)
    expected = f"expected {file} with reward(summary) and handler(event, context)"
    try:
        path = source_file(name)
    except TopLevelModule as err:  # "expected rewards/<name>.py" would send its author to the installed package
        return str(err)
    except FileNotFoundError as err:
        return f"{err} ({expected})"
    if need_handler:
        # Deployed as one file, a module importing its own package or neighbours imported fine
        # here (or failed to, saying less) and failed every invoke on AWS (Runtime.ImportModuleError);
        # the deploy refuses it. Before the import, which fails first on a neighbour's plain name.
        from serverless.deploy import local_import_problem

        module_path = module_name(name)
        try:
            problem = local_import_problem(path, package=module_path.split(".")[0] if "." in module_path else "")
        except ValueError:  # a syntax error: the import below names it
            problem = ""
        if problem:
            return f"reward {name!r}: {problem}"
    try:
        module = importlib.import_module(module_name(name))
    except Exception as err:  # noqa: BLE001 - the module's own import error, named
        return f"reward {name!r}: importing {file} raised {type(err).__name__}: {err}"
    # A signature that cannot take the summary failed every call: every trajectory
    # was left out as reward_failed until the run gave up minutes later.
    for fn_name, args in (("reward", ("summary",)), ("handler", ("event", "context"))):
        fn = getattr(module, fn_name, None)
        if fn is None and fn_name == "handler":
            if not need_handler:
                continue  # only a serverless deployment calls it
            return (f"reward {name!r}: {file} has no function handler(event, context), which "
                    "reward.mode=serverless invokes: add `def handler(event, context): return "
                    "{'reward': reward(event)}`, or run with reward=local")
        if not callable(fn):
            return f"reward {name!r}: {file} has no function {fn_name}({', '.join(args)}) ({expected})"
        try:
            inspect.signature(fn).bind(*args)
        except TypeError:
            return (f"reward {name!r}: {file}'s {fn_name}{inspect.signature(fn)} cannot be called "
                    f"as {fn_name}({', '.join(args)}); give it exactly those parameters")
        except ValueError:  # no signature to read (a builtin): let the call decide
            pass
    # One call on a real summary: a reward that raises (a key it expects but the worker
    # never sends), or returns nan, None or a string, failed every trajectory the same way.
    # Called is what the run calls: serverless invokes `handler` (reward() is tried first so
    # its faults are named as its own); in process, LocalRewardClient runs `handler` where
    # the module has one and `reward` otherwise, so a broken handler failed every
    # trajectory of a reward=local run that this check had passed.
    with_handler = has_handler(module)
    if need_handler or not with_handler:
        result, error, finished = _call_reward(module.reward, summary)
        if not finished:
            # Not refused: a first call may load a model for longer than this. The run's
            # own reward timeouts deal with one that never returns; the start goes on.
            return ""
        problem = _scoring_problem(result, error, f"reward {name!r}: {file}'s reward(summary)",
                                   f" (keys: {', '.join(summary)})",
                                   "a finite number (or {'reward': number})")
        if problem:
            return problem
    if with_handler:
        # What the Lambda runtime (and, in process, LocalRewardClient) calls: a handler returning
        # {"score": ...} passed the check above and failed every trajectory of the run
        # (reward_failed), a minute later. Its context is a real one, as both give it: a handler
        # that budgets its time by context.get_remaining_time_in_millis() failed on None.
        deadline = time.monotonic() + REWARD_CHECK_TIMEOUT_S
        call = scoring_call(module, name, deadline)
        result, error, finished = _call_reward(call, summary)
        where = "" if need_handler else " (reward=local runs call it too: a module's handler is what they score with)"
        if finished:  # one that did not finish in time is let through, as reward() above
            return _scoring_problem(result, error, f"reward {name!r}: {file}'s handler(event, context)",
                                    " as the event", "{'reward': number}, as `return {'reward': reward(event)}` does",
                                    where)
    return ""


def _scoring_problem(result: object, error: BaseException | None, called: str, event: str, returns: str,
                     where: str = "") -> str:
    """Why one finished check call of a reward module scored nothing, or "": `called` (who was
    called) raised `error` on the summary (`event`: how it was passed), or its `result` is no
    reward (`returns`: what it must return instead); `where` ends either message."""
    if error is not None:
        return f"{called} raised {type(error).__name__}: {error} on a one-turn episode's summary{event}{where}"
    value, why = parse_reward(result)
    if value is None:
        return f"{called} must return {returns}; {why}{where}"
    return ""


def task_problem(tasks: list[TaskConfig], reward_mode: str = "local", env_timeout_s: float | None = None) -> str:
    """What is wrong with the first task that cannot run, in one line; "" if none.
    `reward_mode`: the run's reward.mode (serverless needs each module's handler);
    `env_timeout_s`: its rollout.env_step_timeout_s (None: that key's default)."""
    env_timeout_s = ENV_CHECK_TIMEOUT_S if env_timeout_s is None else env_timeout_s
    turns: dict[str, dict] = {}  # env (id and kwargs) -> the info of its checked first turn
    for i, task in enumerate(tasks):
        where = f"tasks[{i}] ({task.name})"
        key = _env_key(task)
        if key not in turns:
            problem, turns[key] = _env_problem(task, env_timeout_s)
            if problem:
                return f"{where}: {problem}"
        problem = _reward_problem(task.reward, _sample_summary(task, turns[key]), reward_mode == "serverless")
        if problem:
            return f"{where}: {problem}"
    return ""


def check_tasks(tasks: list[TaskConfig], reward_mode: str = "local", env_timeout_s: float | None = None) -> None:
    """ValueError naming the first task that cannot run."""
    problem = task_problem(tasks, reward_mode, env_timeout_s)
    if problem:
        raise ValueError(problem)
