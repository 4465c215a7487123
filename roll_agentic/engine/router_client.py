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
Releases are fire-and-forget; they wait `note_linger_s` for company before
leaving, since nothing waits on them and each actor call costs ~1.5 ms of CPU
(both ends, 2 cores), taken from the cores the engines decode on: `bench
engine` counted ~20 note calls per worker per step without the wait, as
episodes ended a few at a time.

With a single engine in all there is nothing to decide, yet the first request
of every episode still waited two router round trips (the first assignment
alone, then the rest of the burst): the last request of a step reached the
engine that much later, and `bench engine` measured ~1 % of throughput per
10 ms of such spread. Such a client answers at once and only tells the router,
on the same ordered fire-and-forget channel as releases, so its counts
(routed, active) stay what they were.
"""

from __future__ import annotations

import asyncio
from typing import Any

# How stale the router's counts of active trajectories may get: least-loaded
# placement reads them, and trajectories last seconds.
NOTE_LINGER_S = 0.05


class CoalescingRouterClient:
    def __init__(self, router: Any, only_engine: int | None = None, note_linger_s: float = NOTE_LINGER_S):
        self.router = router
        self.note_linger_s = note_linger_s
        self.only_engine = only_engine  # the one engine there is: assignments are only told
        self._pending: list[tuple[tuple[str, str, int], asyncio.Future]] = []
        self._assigning = False
        self._notes: list[tuple] = []  # ("assign", task, traj_id, tokens, engine) | ("release", traj_id), in order
        self._noting = False
        self.calls = 0  # actor calls made for assignments (for tests and stats)

    async def assign(self, task: str, traj_id: str, prompt_tokens: int = 0) -> int:
        if self.only_engine is not None:
            self._note(("assign", task, traj_id, prompt_tokens, self.only_engine))
            return self.only_engine
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append(((task, traj_id, prompt_tokens), fut))
        if not self._assigning:
            self._assigning = True
            asyncio.ensure_future(self._assign_loop())
        return await fut

    async def _assign_loop(self) -> None:
        try:
            while self._pending:
                # Drop episodes cancelled while they queued (tail batching aborts them): their
                # release has already left on the note channel and could reach the router
                # first, leaving an assignment nothing ever releases (a leaked active count).
                batch = [(req, fut) for req, fut in self._pending if not fut.done()]
                self._pending = []
                if not batch:
                    continue
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
        self._note(("release", traj_id))

    def _note(self, note: tuple) -> None:
        # One channel for told assignments and releases: a trajectory's release can
        # never overtake its assignment.
        self._notes.append(note)
        if not self._noting:
            self._noting = True
            asyncio.ensure_future(self._note_loop())

    async def _note_loop(self) -> None:
        try:
            while self._notes:
                if self.note_linger_s > 0:
                    await asyncio.sleep(self.note_linger_s)  # the notes of the next few moments join
                batch, self._notes = self._notes, []
                try:
                    await self.router.notify_many.remote(batch)
                except Exception:  # noqa: BLE001 - a lost note only skews load figures until mark_dead
                    pass
        finally:
            self._noting = False
