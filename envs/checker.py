"""Conformance check for text environments, with messages that say what to fix.

`roll-agentic env check ID` runs it. Each check yields a `CheckResult`; a
failure explains what was expected and what came back.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from envs.adapter import DiscreteTextAdapter
from envs.registry import EnvSpecError, make_text_env
from roll_agentic.rollout.env_contract import EnvContractError, check_reset, check_step


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str


def _sample_replies(env: Any) -> list[str]:
    if isinstance(env, DiscreteTextAdapter):
        return list(env.names)
    return ["left", "right", "up", "down", "1", "2", "3", "4", "5", "hello"]


def _rollout(env: Any, seed: int, replies: list[str], steps: int) -> list[tuple]:
    obs, _ = env.reset(seed=seed)
    out: list[tuple] = [(obs,)]
    for i in range(steps):
        # the contract training holds every step to, not only the first one's
        obs, reward, terminated, truncated, _ = check_step(env.step(replies[i % len(replies)]))
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>")


def _action_names_check(env: DiscreteTextAdapter) -> CheckResult:
    """Each action's name parses back to its index; a get_action_meanings() of the wrong
    length (the adapter then falls back to index names) or names equal but for case fail."""
    n = len(env.names)
    meanings = getattr(env.env.unwrapped, "get_action_meanings", None)  # the wrapped env's own
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


def check_env(env_id: str, env_kwargs: dict | None = None, seed: int = 0, steps: int = 20) -> list[CheckResult]:
    results: list[CheckResult] = []
    try:
        env = make_text_env(env_id, env_kwargs)
    except EnvSpecError as err:
        return [CheckResult("build", False, str(err))]
    except Exception as err:  # an author's constructor may raise anything
        return [CheckResult("build", False, f"constructing {env_id!r} raised {type(err).__name__}: {err}")]
    results.append(CheckResult("build", True, f"built {type(env).__name__}"))

    try:
        out = env.reset(seed=seed)
    except Exception as err:
        results.append(CheckResult("reset types", False, f"reset(seed={seed}) raised {type(err).__name__}: {err}"))
        return results
    try:  # the contract training holds every reset to: unpacking here first misreported a bare
        check_reset(out)  # "go" as (str, str) and a longer bare string as a raised ValueError
    except EnvContractError as err:
        results.append(CheckResult("reset types", False, str(err)))
        return results
    results.append(CheckResult("reset types", True, "reset() returns (str, dict)"))

    replies = _sample_replies(env)
    rng = random.Random(seed)
    rng.shuffle(replies)
    step_ok, detail = True, "step() returns (str, float, bool, bool, dict)"
    try:
        out = env.step(replies[0])
    except Exception as err:
        results.append(CheckResult("step types", False, f"step({replies[0]!r}) raised {type(err).__name__}: {err}"))
        return results
    try:  # the contract training holds every step to (numpy rewards and flags pass, NaN fails)
        check_step(out)
    except EnvContractError as err:
        step_ok, detail = False, str(err)
    results.append(CheckResult("step types", step_ok, detail))

    try:
        env.reset(seed=seed)
        o, r, te, tr, inf = env.step("\x00 this reply names no action \ufffd")
        ok = bool(inf.get("invalid_action"))
        results.append(CheckResult("unparseable reply", ok, "an unparseable reply is an invalid action" if ok else
                                   "an unparseable reply must set info['invalid_action']=True (the worker charges a format penalty)"))
    except Exception as err:
        results.append(CheckResult("unparseable reply", False,
                                   f"step() raised {type(err).__name__} on an unparseable reply; return info['invalid_action']=True instead"))

    if isinstance(env, DiscreteTextAdapter):
        results.append(_action_names_check(env))

    try:  # episodes go past the first step: an env that breaks later (a 4-tuple, a raise) is a failed check
        a = _rollout(env, seed, replies, steps)
        b = _rollout(env, seed, replies, steps)
    except Exception as err:
        results.append(CheckResult("determinism", False, f"an episode of up to {steps} steps with replies "
                                   f"{replies[:3]}... failed: {type(err).__name__}: {err}"))
    else:
        same = a == b
        results.append(CheckResult("determinism", same, f"same seed and replies give the same {len(a)}-step episode"
                                   if same else "two episodes with the same seed and replies differ; seed every "
                                   "random choice from reset(seed=...)"))
        if any(_OBJECT_REPR.search(step[0]) for step in a):  # str() of an object: its address, no state
            results.append(CheckResult("observation text", False, "the observation's text is an object's repr "
                                       "(a memory address), which tells the policy nothing: return text, or give "
                                       "the env an ansi render() (render_mode='ansi')"))
    try:
        env.close()
    except Exception as err:  # a run shrugs it off, but it is the author's to fix
        results.append(CheckResult("close", False, f"close() raised {type(err).__name__}: {err}"))
    return results
