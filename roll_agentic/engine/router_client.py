"""A rollout worker's side of the Router: many episodes' requests, few actor calls.

Every episode asks the router for an engine when its first prompt exists and
releases it when it ends. With one Ray call each, a worker running 64 episodes
makes 128 calls per step, and the router, one actor, serves them one after
another: the last episode of a step waits behind all the others before its
first token is even requested (measured in `bench engine`: most of the
framework's per-step overhead on short rollouts).

The client coalesces instead, without adding latency: the first request goes
out at once; requests that arrive while a call is in flight wait for it and
leave together in the next one. Under light load every request is its own
call (as before); under a burst, calls are batched as large as the burst.
Releases are fire-and-forget, batched the same way.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingRouterClient:
    def __init__(self, router: Any):
        self.router = router
        self._pending: list[tuple[tuple[str, str, int], asyncio.Future]] = []
        self._assigning = False
        self._releases: list[str] = []
        self._releasing = False
        self.calls = 0  # actor calls made for assignments (for tests and stats)

    async def assign(self, task: str, traj_id: str, prompt_tokens: int = 0) -> int:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append(((task, traj_id, prompt_tokens), fut))
        if not self._assigning:
            self._assigning = True
            asyncio.ensure_future(self._assign_loop())
        return await fut

    async def _assign_loop(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                self.calls += 1
                try:
                    indices = await self.router.assign_many.remote([req for req, _ in batch])
                except Exception as err:  # the router is unreachable: every waiter learns why
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(err)
                    continue
                for (_, fut), index in zip(batch, indices, strict=True):
                    if not fut.done():  # its episode may have been cancelled meanwhile
                        fut.set_result(index)
        finally:
            self._assigning = False

    def release(self, traj_id: str) -> None:
        self._releases.append(traj_id)
        if not self._releasing:
            self._releasing = True
            asyncio.ensure_future(self._release_loop())

    async def _release_loop(self) -> None:
        try:
            while self._releases:
                batch, self._releases = self._releases, []
                try:
                    await self.router.release_many.remote(batch)
                except Exception:  # noqa: BLE001 - a lost release only skews load figures until mark_dead
                    pass
        finally:
            self._releasing = False
