"""Calls on the multiplexer's actors that outlive a single call site.

- Pinning actors to a pool's cores: RollMux's rollout and training pools are
  separate machines; on one machine each pool gets its own cores.
- A call on a node's trainer slot that follows the slot if it was replaced
  meanwhile (`Multiplexer._trainer_lost` kills a wedged slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Sequence

import ray


def _pin_here(_instance: object, cpus: tuple[int, ...]) -> list[int]:
    """Pins every thread of the calling process to `cpus` (threads it starts later inherit the mask)."""
    allowed = sorted(set(cpus) & set(range(os.cpu_count() or 1)))
    if not allowed:
        return []
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(tid), allowed)
    return allowed


async def pin_actors(actors: list, cpus: Sequence[int]) -> None:
    """Pins Ray actors' processes to `cpus` (nothing if empty): a pool's own hardware, modelled.

    RollMux's rollout and training pools are separate machines; on one machine
    each pool gets its own cores, so one pool's phase never steals the other's
    CPU -- in the multiplexed pass and, identically, in the solo baseline.
    """
    if cpus and actors and hasattr(os, "sched_setaffinity"):
        await asyncio.gather(*(a.__ray_call__.remote(_pin_here, tuple(cpus)) for a in actors))


async def on_current_slot(slots: dict[str, object], node: str, call: Callable[[object], Awaitable]):
    """`call(slot)` on the node's trainer slot; again on the new one if the slot it went to was
    replaced meanwhile (`Multiplexer._trainer_lost` kills a wedged slot, failing what queued behind)."""
    slot = slots[node]
    try:
        return await call(slot)
    except ray.exceptions.RayActorError:
        if slots[node] is slot:
            raise
        return await call(slots[node])
