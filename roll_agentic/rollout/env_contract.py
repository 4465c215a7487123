"""What a text env's reset and step must return, checked on every call.

A wrong type from an env (an int observation, a reward of "abc", a 4-tuple
from the old gym API) would otherwise surface later as a tokenizer or float
error, look like an engine failure, and get a healthy engine marked dead.
Checked inside the env call, the violation is an env failure of that one
episode, with a message that names the env method and what was wrong.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import numpy as np


class EnvContractError(TypeError):
    pass


def _short(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.80}"


FLAG_TYPES = (bool, int, np.bool_, np.integer)  # numpy bools and ints, as many gymnasium envs return


def check_flag(where: str, name: str, value: Any) -> None:
    """EnvContractError unless `value` is a flag (a bool or an int, numpy's too): "<where>: <name> ..."."""
    if not isinstance(value, FLAG_TYPES):
        raise EnvContractError(f"{where}: {name} must be a bool, got {_short(value)}")


def _check_text(obs: Any, where: str) -> None:
    if not isinstance(obs, str):
        raise EnvContractError(f"{where}: observation must be str, got {_short(obs)}")
    try:
        obs.encode("utf-8")
    except UnicodeEncodeError as err:
        # A lone surrogate (json.loads of half an emoji pair, surrogateescape-decoded tool
        # output): the tokenizer raised outside the env call, taken for an engine failure.
        raise EnvContractError(f"{where}: observation is not valid UTF-8 text ({err.reason} at character "
                               f"{err.start}: {obs[max(0, err.start - 20):err.start + 20]!r})") from None


def check_reset(out: Any) -> tuple[str, dict]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise EnvContractError(f"reset must return (observation: str, info: dict), got {_short(out)}")
    obs, info = out
    _check_text(obs, "reset")
    if not isinstance(info, dict):
        raise EnvContractError(f"reset: info must be dict, got {_short(info)}")
    return out


def check_step(out: Any) -> tuple[str, float, bool, bool, dict]:
    if not isinstance(out, tuple) or len(out) != 5:
        raise EnvContractError("step must return (observation, reward, terminated, truncated, info), "
                               f"got {_short(out)}")
    obs, reward, terminated, truncated, info = out
    _check_text(obs, "step")
    if isinstance(reward, bool) or not isinstance(reward, Real) or not math.isfinite(float(reward)):
        raise EnvContractError(f"step: reward must be a finite number, got {_short(reward)}")
    check_flag("step", "terminated", terminated)
    check_flag("step", "truncated", truncated)
    if not isinstance(info, dict):
        raise EnvContractError(f"step: info must be dict, got {_short(info)}")
    # The worker reads these as flags: one without a truth value (a numpy array of several
    # values) raised in the worker, outside the env call, and was taken for an engine failure;
    # a string one ("False") was read as True.
    for key in ("invalid_action", "success"):
        if key in info:
            check_flag("step", f"info[{key!r}]", info[key])
    return out


_CHECKS: dict[str, Callable[[Any], Any]] = {"reset": check_reset, "step": check_step}


def checked(fn: Callable) -> Callable:
    """`fn` with its result checked when it is an env's reset or step; other calls pass through."""
    check = _CHECKS.get(getattr(fn, "__name__", ""))
    if check is None:
        return fn

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return check(fn(*args, **kwargs))

    return call
