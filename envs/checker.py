"""Conformance check for text environments, with messages that say what to fix.

`roll-agentic env check ID` runs it. Each check yields a `CheckResult`; a
failure explains what was expected and what came back. Each env call is bounded
as a run bounds it (task_check's limit), so a hung reset or step is a failed check.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.adapter import DiscreteTextAdapter, unwrapped_env
from envs.registry import EnvSpecError, make_text_env
from roll_agentic.rollout.env_contract import EnvContractError, check_reset, check_step
from roll_agentic.rollout.task_check import ENV_CHECK_TIMEOUT_S, _bounded, _call_in_thread, _TooSlow


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str


def _sample_replies(env: Any) -> list[str]:
    if isinstance(env, DiscreteTextAdapter):
        return list(env.names)
    return ["left", "right", "up", "down", "1", "2", "3", "4", "5", "hello"]


def _rollout(env: Any, seed: int, replies: list[str], steps: int, calls: _EnvCalls) -> list[tuple]:
    obs, _ = calls(f"reset(seed={seed})", env.reset, seed=seed)
    out: list[tuple] = [(obs,)]
    for i in range(steps):
        # the contract training holds every step to, not only the first one's
        reply = replies[i % len(replies)]
        obs, reward, terminated, truncated, _ = check_step(calls(f"step({reply!r}) at step {i + 1} of an episode",
                                                                 env.step, reply))
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")


def _action_names_check(env: DiscreteTextAdapter) -> CheckResult:
    """Each action's name parses back to its index; a get_action_meanings() of the wrong
    length (the adapter then falls back to index names) or names equal but for case fail."""
    n = len(env.names)
    meanings = getattr(unwrapped_env(env.env), "get_action_meanings", None)  # the wrapped env's own
    if callable(meanings):
        given = list(meanings())
        if len(given) != n:
            return CheckResult("text round trip", False, f"get_action_meanings() returned {len(given)} names for "
                               f"Discrete({n}): give one name per action (the policy is asked for indices instead)")
    lowered = [name.lower() for name in env.names]
    clash = sorted({name for name in lowered if lowered.count(name) > 1})
    if clash:
        return CheckResult("text round trip", False, f"action names {clash} repeat when case is ignored, as replies "
                           "are matched: give each action a name of its own")
    bad = [name for i, name in enumerate(env.names) if env.parse_action(f"I choose {name}.") != i]
    return CheckResult("text round trip", not bad, "every action name parses back to its index" if not bad
                       else f"action names {bad} do not parse back to their own index")


def result_line(result: CheckResult) -> str:
    return f"{'PASS' if result.ok else 'FAIL'}  {result.name:18s} {result.detail}"


def print_result(result: CheckResult) -> None:
    """An `on_result` for check_env: each line shown as its check ends, not all at the end."""
    print(result_line(result), flush=True)


class _EnvCalls:
    """Each env call of the check under the limit a run puts on every env call: called
    directly, a reset or step that never returned hung `env check` with nothing printed."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.hung = ""  # the call that did not return; the env is not called again after it

    def __call__(self, call: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return _bounded(functools.partial(fn, *args, **kwargs), self.timeout_s)
        except _TooSlow:
            self.hung = call
            raise

    def too_slow(self) -> str:
        return (f"{self.hung} did not return within {self.timeout_s:g}s, the limit a run puts on every env "
                "call (rollout.env_step_timeout_s), so every episode would fail; make it return sooner or "
                "raise that limit")


def check_env(env_id: str, env_kwargs: dict | None = None, seed: int = 0, steps: int = 20,
              timeout_s: float = ENV_CHECK_TIMEOUT_S,
              on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Every check's result. `timeout_s` bounds each env call (a run's default
    rollout.env_step_timeout_s); `on_result` gets each result as soon as it is made."""
    results: list[CheckResult] = []

    def add(result: CheckResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    calls = _EnvCalls(timeout_s)
    try:
        env = calls(f"building {env_id!r}", make_text_env, env_id, env_kwargs)
    except _TooSlow:
        add(CheckResult("build", False, calls.too_slow()))
        return results
    except EnvSpecError as err:
        add(CheckResult("build", False, str(err)))
        return results
    except Exception as err:  # an author's constructor may raise anything
        add(CheckResult("build", False, f"constructing {env_id!r} raised {type(err).__name__}: {err}"))
        return results
    add(CheckResult("build", True, f"built {type(env).__name__}"))
    _check_built(env, seed, steps, calls, add)
    close = getattr(env, "close", None)  # a text env need not subclass gym.Env: it may have none
    if not callable(close):
        return results
    if calls.hung:  # a close after a hung call may hang on a lock that call holds: not waited for
        _call_in_thread(close, 0.0)
        return results
    try:
        calls("close()", close)
    except _TooSlow:
        add(CheckResult("close", False, calls.too_slow()))
    except Exception as err:  # a run shrugs it off, but it is the author's to fix
        add(CheckResult("close", False, f"close() raised {type(err).__name__}: {err}"))
    return results


def _check_built(env: Any, seed: int, steps: int, calls: _EnvCalls, add: Callable[[CheckResult], None]) -> None:
    """The checks of a built env, each result given to `add`; they end at the first hung call."""
    try:
        out = calls(f"reset(seed={seed})", env.reset, seed=seed)
    except _TooSlow:
        add(CheckResult("reset types", False, calls.too_slow()))
        return
    except Exception as err:
        add(CheckResult("reset types", False, f"reset(seed={seed}) raised {type(err).__name__}: {err}"))
        return
    try:  # the contract training holds every reset to: unpacking here first misreported a bare
        check_reset(out)  # "go" as (str, str) and a longer bare string as a raised ValueError
    except EnvContractError as err:
        add(CheckResult("reset types", False, str(err)))
        return
    add(CheckResult("reset types", True, "reset() returns (str, dict)"))

    replies = _sample_replies(env)
    rng = random.Random(seed)
    rng.shuffle(replies)
    step_ok, detail = True, "step() returns (str, float, bool, bool, dict)"
    try:
        out = calls(f"step({replies[0]!r})", env.step, replies[0])
    except _TooSlow:
        add(CheckResult("step types", False, calls.too_slow()))
        return
    except Exception as err:
        add(CheckResult("step types", False, f"step({replies[0]!r}) raised {type(err).__name__}: {err}"))
        return
    try:  # the contract training holds every step to (numpy rewards and flags pass, NaN fails)
        check_step(out)
    except EnvContractError as err:
        step_ok, detail = False, str(err)
    add(CheckResult("step types", step_ok, detail))

    try:
        calls(f"reset(seed={seed})", env.reset, seed=seed)
        o, r, te, tr, inf = calls("step(<a reply that names no action>)", env.step,
                                  "\x00 this reply names no action \ufffd")
        ok = bool(inf.get("invalid_action"))
        add(CheckResult("unparseable reply", ok, "an unparseable reply is an invalid action" if ok else
                        "an unparseable reply must set info['invalid_action']=True (the worker charges a format penalty)"))
    except _TooSlow:
        add(CheckResult("unparseable reply", False, calls.too_slow()))
        return
    except Exception as err:
        add(CheckResult("unparseable reply", False,
                        f"step() raised {type(err).__name__} on an unparseable reply; return info['invalid_action']=True instead"))

    if isinstance(env, DiscreteTextAdapter):
        add(_action_names_check(env))

    try:  # episodes go past the first step: an env that breaks later (a 4-tuple, a raise) is a failed check
        a = _rollout(env, seed, replies, steps, calls)
        b = _rollout(env, seed, replies, steps, calls)
    except _TooSlow:
        add(CheckResult("determinism", False, calls.too_slow()))
        return
    except Exception as err:
        add(CheckResult("determinism", False, f"an episode of up to {steps} steps with replies "
                        f"{replies[:3]}... failed: {type(err).__name__}: {err}"))
        return
    same = a == b
    add(CheckResult("determinism", same, f"same seed and replies give the same {len(a)}-step episode"
                    if same else "two episodes with the same seed and replies differ; seed every "
                    "random choice from reset(seed=...)"))
    if any(_OBJECT_REPR.search(step[0]) for step in a):  # str() of an object: its address, no state
        add(CheckResult("observation text", False, "the observation's text is an object's repr "
                        "(a memory address), which tells the policy nothing: return text, or give "
                        "the env an ansi render() (render_mode='ansi')"))
