"""Reading every engine's load figures, whether or not the engine is still alive.

A killed or crashed engine must not stop the step that asks for metrics: its
last known figures stand in for it, marked `alive: False` with nothing
outstanding, so a pool's cost stops growing when its engines die and its
token counters never run backwards.
"""

from __future__ import annotations

import time
from typing import Any

import ray


def collect_engine_stats(engines: list[Any], last: list[dict] | None, pools: list[str],
                         timeout_s: float = 10.0) -> list[dict]:
    """EngineHost.stats() of each engine, index-aligned with `engines`."""
    refs = [e.stats.remote() for e in engines]
    deadline = time.monotonic() + timeout_s
    out: list[dict] = []
    for i, ref in enumerate(refs):
        try:
            stats = dict(ray.get(ref, timeout=max(0.1, deadline - time.monotonic())), alive=True)
        except (ray.exceptions.RayError, TimeoutError):
            prev = last[i] if last and i < len(last) and last[i] else {
                "pool": pools[i] if i < len(pools) else "default", "busy_s": 0.0, "uptime_s": 0.0,
                "per_task": {}, "engine": {}}
            stats = dict(prev, alive=False, outstanding=0)
        out.append(stats)
    return out
