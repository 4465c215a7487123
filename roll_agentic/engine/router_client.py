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

A trajectory's notes reach the router before its next assignment. A worker
retries a failed or stale episode at once under the same traj_id; its new
assignment used to overtake the previous attempt's lingering release, found
the trajectory still sticky (so not counted again), and the late release then
dropped it: the router saw no load for that engine while attempt 2 ran.
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
        self._delivery: asyncio.Future | None = None  # the latest notes call; each waits for the one before
        self._delivering: dict[str, int] = {}  # traj_id -> its notes in calls not yet answered
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
                if await self._notes_first({req[1] for req, _ in batch}):
                    batch = [(req, fut) for req, fut in batch if not fut.done()]  # cancelled while waiting
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
                if batch:  # else an assignment took them along meanwhile (_notes_first)
                    await asyncio.wait({self._deliver(batch)})
        finally:
            self._noting = False

    async def _notes_first(self, traj_ids: set[str]) -> bool:
        """Waits until the router holds every note of `traj_ids` sent or pending; True if any was.

        A retry reuses its traj_id, and attempt 1's release may still linger here or
        be on its way. Rather than add an argument to assign_many (every assignment
        call would carry it), the pending notes, all of them, leave now in their own
        call, awaited before the assignment is sent: only a retry racing its own
        release pays that round trip, and the lingering call they would have taken
        finds nothing left and is skipped, so the count of calls does not grow.
        Awaited rather than relying on Ray running one caller's calls in order,
        which holds only while the Router actor runs one call at a time.
        """
        if any(_traj(note) in traj_ids for note in self._notes):
            batch, self._notes = self._notes, []
            await asyncio.wait({self._deliver(batch)})  # after every earlier notes call, too (they chain)
            return True
        if self._delivery is not None and not traj_ids.isdisjoint(self._delivering):
            await asyncio.wait({self._delivery})  # the latest call: it waited for those before it
            return True
        return False

    def _deliver(self, batch: list[tuple]) -> asyncio.Future:
        """One notes call, made once the previous one is answered: the channel stays in order."""
        trajs = [_traj(note) for note in batch]
        for traj in trajs:
            self._delivering[traj] = self._delivering.get(traj, 0) + 1
        self._delivery = asyncio.ensure_future(self._send(self._delivery, batch, trajs))
        return self._delivery

    async def _send(self, previous: asyncio.Future | None, batch: list[tuple], trajs: list[str]) -> None:
        try:
            if previous is not None:
                await asyncio.wait({previous})  # in order; its failure or cancellation is its own
            await self.router.notify_many.remote(batch)
        except Exception:  # noqa: BLE001 - a lost note only skews load figures until mark_dead
            pass
        finally:
            for traj in trajs:
                left = self._delivering[traj] - 1
                if left:
                    self._delivering[traj] = left
                else:
                    del self._delivering[traj]
            if self._delivery is asyncio.current_task():
                self._delivery = None


def _traj(note: tuple) -> str:
    return note[1] if note[0] == "release" else note[2]
