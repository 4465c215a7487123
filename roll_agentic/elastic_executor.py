"""User code off the event loop, on as few threads as keep up with it.

Env calls (rollout worker) and in-process reward functions (reward/local.py)
are user code: a rollout worker must never run one on its event loop, where
one that hangs would stop every episode of the worker. With a thread per call (a plain
pool of 256), a burst of 64 fast calls (a new step's `reset`s, or a turn's
`step`s) woke 64 threads at once; they and the loop then queued for the GIL
one after another, and a 50 us reset took 10-28 ms to come back (measured in
`bench engine`, 2 cores): the last request of a step reached the engine that
much later.

This executor keeps the protection and drops the convoy:
- a call goes to a thread that is already running calls, unless every running
  thread has been on its current call longer than `busy_after_s`; only then
  is another thread started (or an idle one woken). Fast calls thus run back
  to back on one or two threads, while slow or hung ones get threads of their
  own within `busy_after_s`, as many as there are calls waiting; a call of a
  kind that has been slow on average (an env's `step` that waits on a tool)
  gets a thread at once, as in a plain pool;
- a thread hands its results to the loop in batches: one wake-up of the loop
  for a burst, not one per call.
Timeouts stay with the caller (a hung call's future is cancelled there; its
thread stays blocked and counts as busy, so it never holds up other calls).
But a thread cannot be killed: a call that never returns kept its thread for
good, and after `max_threads` of them each later call waited out its
caller's timeout. A caller that gives up therefore calls
`abandon(fut)`: the thread still on that call stops counting against
`max_threads` (another serves the queue) and ends when the call returns, if
ever. It is a daemon, so it never holds up the interpreter's exit, and
`close()` waits for no thread. The caller bounds how many it abandons
(`abandoned`): each one is a thread leaked, maybe spinning on the GIL. A call
whose caller gave up before a thread took it is not run at all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

BUSY_AFTER_S = 0.005  # a thread on one call for longer than this gets help
DELIVER_EVERY = 16  # results a thread holds at most before waking the loop


class ElasticExecutor:
    def __init__(self, loop: asyncio.AbstractEventLoop, max_threads: int = 256,
                 busy_after_s: float = BUSY_AFTER_S):
        self.loop = loop
        self.max_threads = max_threads
        self.busy_after_s = busy_after_s
        self._cv = threading.Condition()
        self._queue: deque[tuple[Callable[[], Any], asyncio.Future, str]] = deque()
        self._started: dict[int, float] = {}  # thread id -> when its current call began (0: none)
        self._running: dict[int, tuple[asyncio.Future, str]] = {}  # thread id -> its current call's future, kind
        self._abandoned: dict[int, str] = {}  # thread id -> kind of the call it was left on
        self._held: dict[int, list] = {}  # thread id -> results not yet handed to the loop
        self._threads = 0
        self._idle = 0  # threads waiting for work
        self._pending_wakes = 0  # of those, notified and not yet awake
        self._waking = 0  # threads woken or started that have not taken a call yet
        self._call_s: dict[str, float] = {}  # kind of call -> moving average of its durations
        self._checking = False
        self._closed = False
        self.threads_started = 0  # for tests and stats

    def submit(self, fn: Callable[[], Any], kind: str = "") -> asyncio.Future:
        """Runs `fn()` on a worker thread; the returned future resolves on the loop.

        `kind` names what the call is (e.g. "FrozenLakeText.step"): once calls of a
        kind have been slow on average, each new one gets a thread at once."""
        fut = self.loop.create_future()
        with self._cv:
            if self._closed:
                raise RuntimeError("ElasticExecutor: submit after close")
            self._queue.append((fn, fut, kind))
            if self._call_s.get(kind, 0.0) > self.busy_after_s:  # known slow: a thread of its own, now
                self._help_locked(1)
            else:
                self._add_help_locked()
        self._schedule_check()  # also hands back results held by a thread that got stuck
        return fut

    @property
    def abandoned(self) -> int:
        """Threads still on a call whose caller gave up (abandon)."""
        return len(self._abandoned)

    def abandoned_kinds(self) -> dict[str, int]:
        """Kind -> how many threads are still on abandoned calls of that kind."""
        with self._cv:
            kinds = list(self._abandoned.values())
        return {kind: kinds.count(kind) for kind in set(kinds)}

    def abandon(self, fut: asyncio.Future) -> bool:
        """The caller stopped waiting for `fut` (it timed out). If a thread is still on
        that call, it no longer counts against max_threads, so calls waiting in the
        queue get another thread; True then. False: the call had already returned,
        or had not started (it never will: see _run)."""
        with self._cv:
            tid = next((t for t, (running, _) in self._running.items() if running is fut), None)
            if tid is None:
                return False
            # Out of every count: a stuck thread among the running ones would make a later
            # burst look stuck too and wake a thread per call.
            self._abandoned[tid] = self._running.pop(tid)[1]
            del self._started[tid]
            held = self._held.pop(tid)  # results it made before this call: they may never go otherwise
            self._threads -= 1
            self._add_help_locked()
        _deliver(held)
        return True

    def close(self) -> None:
        # Wakes idle threads to end; joins none: one stuck in a call would hold up the
        # caller's shutdown for good (they are daemons, so neither does the interpreter's).
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    # -- who runs the queue ----------------------------------------------------------------
    def _add_help_locked(self) -> None:
        """Wakes or starts threads while calls wait and no running thread is free to
        take them soon: none runs, or every one is on a call older than busy_after_s."""
        if not self._queue:
            return
        if self._waking:  # help is on its way
            return
        now = time.monotonic()
        active = [t for t in self._started.values() if t > 0]
        if active and any(now - t <= self.busy_after_s for t in active):
            return  # a thread on a fast call will take the next one
        self._help_locked(len(self._queue) if active else 1)  # stuck threads: one each; none running: one

    def _help_locked(self, helpers: int) -> None:
        for _ in range(helpers):
            if self._idle > self._pending_wakes:
                self._pending_wakes += 1
                self._cv.notify()
            elif self._threads < self.max_threads:
                self._threads += 1
                self.threads_started += 1
                threading.Thread(target=self._run, name="env-call", daemon=True).start()
            else:
                break
            self._waking += 1

    def _schedule_check(self) -> None:
        # While calls wait, look again after busy_after_s: the running threads may
        # be stuck on slow calls by then.
        if not self._checking:
            self._checking = True
            self.loop.call_later(self.busy_after_s, self._check)

    def _check(self) -> None:
        self._checking = False
        stolen: list[tuple[asyncio.Future, bool, Any]] = []
        with self._cv:
            if self._closed:
                return
            now = time.monotonic()
            for tid, began in self._started.items():
                if began > 0 and now - began > self.busy_after_s and self._held.get(tid):
                    stolen += self._held[tid]  # results held by a thread now stuck on a slow call
                    self._held[tid] = []
            again = bool(self._queue) or any(self._held.values())
            if self._queue:
                self._waking = 0  # whoever was woken and has not shown up is not coming soon
                self._add_help_locked()
        if stolen:
            _deliver(stolen)
        if again:
            self._schedule_check()

    # -- a worker thread --------------------------------------------------------------------
    def _run(self) -> None:
        me = threading.get_ident()
        fresh = True  # started or woken, and counted in _waking until it takes a call or waits
        with self._cv:
            held = self._held[me] = []
        while True:
            item = None
            with self._cv:
                self._started[me] = 0.0
                if fresh and (self._queue or not self._held[me]):
                    fresh = False
                    self._waking = max(0, self._waking - 1)
                if self._queue:
                    item = self._queue.popleft()
                    # Its caller gave up before it started: nobody wants it run. (Read off the
                    # loop: at worst a call given up on at this instant still runs.)
                    if item[1].done():
                        continue
                    self._running[me] = item[1], item[2]
                    self._started[me] = time.monotonic()
                elif not self._held[me]:  # nothing to run and nothing to hand back: wait
                    if self._closed:
                        del self._started[me], self._held[me]
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cv.wait()
                    self._idle -= 1
                    self._pending_wakes = max(0, self._pending_wakes - 1)
                    fresh = True
                    continue
                else:  # the queue is empty: hand back what this thread holds
                    held, self._held[me] = self._held[me], []
            if item is None:
                self._deliver_later(held)
                continue
            fn, fut, kind = item
            began = time.monotonic()
            try:
                result = (fut, True, fn())
            except BaseException as err:  # noqa: BLE001 - the env's failure is the caller's to judge
                result = (fut, False, err)
            with self._cv:
                took = time.monotonic() - began
                self._call_s[kind] = 0.8 * self._call_s.get(kind, took) + 0.2 * took
                if self._abandoned.pop(me, None) is not None:
                    return  # replaced (abandon): counted nowhere now, and nobody awaits this result
                del self._running[me]
                self._held[me].append(result)
                full = len(self._held[me]) >= DELIVER_EVERY
                if full:
                    held, self._held[me] = self._held[me], []
            if full:
                self._deliver_later(held)

    def _deliver_later(self, results: list[tuple[asyncio.Future, bool, Any]]) -> None:
        try:
            self.loop.call_soon_threadsafe(_deliver, results)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


def _deliver(results: list[tuple[asyncio.Future, bool, Any]]) -> None:
    for fut, ok, value in results:
        if fut.done():  # timed out or cancelled meanwhile
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
