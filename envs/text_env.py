"""The text-environment seam: what a trajectory worker needs from a task.

Any gymnasium env whose observations and actions are text satisfies it as is;
envs with a `Discrete` action space get `DiscreteTextAdapter` (adapter.py).
An unparseable reply must come back as `info["invalid_action"] = True`, never
as an exception: the worker charges the task's format penalty and goes on.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TextEnv(Protocol):
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]: ...

    def close(self) -> None: ...
