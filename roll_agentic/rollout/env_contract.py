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


def check_reset(out: Any) -> tuple[str, dict]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise EnvContractError(f"reset must return (observation: str, info: dict), got {_short(out)}")
    obs, info = out
    if not isinstance(obs, str):
        raise EnvContractError(f"reset: observation must be str, got {_short(obs)}")
    if not isinstance(info, dict):
        raise EnvContractError(f"reset: info must be dict, got {_short(info)}")
    return out


def check_step(out: Any) -> tuple[str, float, bool, bool, dict]:
    if not isinstance(out, tuple) or len(out) != 5:
        raise EnvContractError("step must return (observation, reward, terminated, truncated, info), "
                               f"got {_short(out)}")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str):
        raise EnvContractError(f"step: observation must be str, got {_short(obs)}")
    if isinstance(reward, bool) or not isinstance(reward, Real) or not math.isfinite(float(reward)):
        raise EnvContractError(f"step: reward must be a finite number, got {_short(reward)}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool | int | np.bool_):  # numpy bools, as many gymnasium envs return
            raise EnvContractError(f"step: {name} must be a bool, got {_short(flag)}")
    if not isinstance(info, dict):
        raise EnvContractError(f"step: info must be dict, got {_short(info)}")
    # The worker reads these as flags: one without a truth value (a numpy array of several
    # values) raised in the worker, outside the env call, and was taken for an engine failure.
    for key in ("invalid_action", "success"):
        if key in info:
            try:
                bool(info[key])
            except Exception:  # noqa: BLE001 - whatever its __bool__ raises, it is no flag
                raise EnvContractError(f"step: info[{key!r}] must be a bool, got {_short(info[key])}") from None
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
