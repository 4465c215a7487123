"""What scoring one trajectory produced, and the seam every reward client implements."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any, Protocol, runtime_checkable


@dataclass
class RewardOutcome:
    value: float | None  # None exactly when ok is False: a failed reward is never a silent 0
    ok: bool
    latency_s: float  # wall time of score(), retries and backoff included
    retries: int  # attempts after the first
    cold_start: bool  # an attempt paid a cold start (Init Duration in its REPORT line)
    throttles: int  # attempts refused with 429 TooManyRequestsException
    billed_ms: float  # Lambda's billed duration, summed over attempts that ran
    gb_s: float  # billed GB-seconds (billed_ms x MemorySize)
    error: str = ""
    # A failure the next call would meet again: the reward function raised (anything but a
    # network or time-out error), returned no number, or could not be loaded. False for ok
    # outcomes and for what may pass (throttles, timeouts, the service down): roll_agentic/failures.py
    deterministic: bool = False


@runtime_checkable
class RewardClient(Protocol):
    async def score(self, function: str, summary: dict) -> RewardOutcome:
        """Scores one trajectory summary with the reward module `function` (e.g. "frozenlake")."""
        ...

    async def close(self) -> None: ...


def parse_reward(result: Any) -> tuple[float | None, str]:
    """The reward in a handler's (or `reward`'s) result: `{"reward": x}` or a bare number.

    Returns (value, "") or (None, a message saying what was wrong).
    """
    raw = result.get("reward") if isinstance(result, dict) else result
    if isinstance(result, dict) and "reward" not in result:
        return None, f"the reward function returned a dict without a 'reward' key: {sorted(result)[:8]}"
    # numpy scalars (np.float32, np.int64) and 0-d arrays or tensors are what a reward computed
    # with numpy or torch returns; they were refused as "not a number" and failed every
    # trajectory. Duck-typed, so parsing needs neither library. A bool stays refused either way
    # (np.bool_ becomes one): True is a predicate's answer, not a score.
    if getattr(raw, "shape", None) == () and callable(getattr(raw, "item", None)):
        try:
            raw = raw.item()
        except Exception:  # noqa: BLE001 - no scalar in it: refused below as what it is
            pass
    if isinstance(raw, bool) or not isinstance(raw, Real):
        return None, f"the reward is not a number: {raw!r:.200}"
    try:
        value = float(raw)
    except OverflowError:  # an int past float's range: raised out of the client's score() before
        return None, f"the reward is not finite: {raw!r:.40}"
    if not math.isfinite(value):
        return None, f"the reward is not finite: {value}"
    return value, ""
