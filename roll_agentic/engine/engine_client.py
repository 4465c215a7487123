"""A rollout worker's side of one engine actor: many episodes' requests, few Ray calls.

Each episode turn is one generate request. Sent as one Ray call each, a worker
starting 64 episodes spends 0.2-0.8 ms per call just submitting them (14-50 ms
for the burst, measured on 2 cores), the engine actor handles 64 calls one by
one, and 64 replies come back one by one. The requests trickle into the engine
over that time, so it decodes the first ones in small batches while the last
are still arriving: the gap `bench engine` measures between the framework and
the same engine driven directly.

The client batches instead, without waiting for anything: requests issued in
the same turn of the event loop leave together in one streaming call
(`EngineHost.generate_batch`), and the engine yields each group of results as
they finish, so no request waits for a slower one in its batch. Results that
finish within `result_linger_s` of each other while others of the batch still
run share one message: each message costs ~1.5 ms of CPU (both ends, 2 cores),
and `bench engine` counted ~18 per worker per step without the linger. The
last results of a batch never wait. In-process engines (tests drive the
worker with `LocalHandle`) are called one by one.

Every request has a time limit (`request_timeout_s`). An engine actor that is
alive but never answers (a wedged engine process, a vLLM engine core frozen
under a living host, a request lost between host and engine) otherwise held
its episode, and the episode's group, forever. Past the limit the request
fails with `EngineTimeout`, an engine failure like a dead actor's (the worker
marks the engine dead and retries elsewhere), and the host is told to drop
the request and to prove it still serves before it is routed to again
(`EngineHost.expire`).

The limit counts only time the engine was awake. A sleeping engine (put to sleep
for a weight sync, a RollMux phase switch, `bench reliability`) holds its
requests until the wake, and that is no fault: such a request used to reach the
limit and fail like a dead engine's (the worker counted an engine failure,
marked the engine dead and retried the episode elsewhere). When a request
reaches its limit the client asks the host how long the engine slept while it
held the request (`EngineHost.slept_during`, one call for all the requests due
at once) and, if it slept, waits that much longer; the check repeats for as long
as the engine sleeps. An engine awake and silent for the whole limit still fails
the request, as does one that cannot say how long it slept (a host without
`slept_during`, one that does not answer the question within `SLEEP_CHECK_S`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

from roll_agentic.engine.protocol import GenerationResult, SamplingParams

# About one decode step of a full batch on 2 CPU cores: a turn's reply arrives
# at most this much later, and only while other requests of its batch still run.
RESULT_LINGER_S = 0.01
# No answer within this long means the engine is wedged, not slow: far above a
# long-tail reply (thousands of tokens) on a loaded engine, far below forever.
REQUEST_TIMEOUT_S = 600.0
# The longest a request past its limit waits to learn whether its engine slept: a host
# answers at once unless its actor is stuck too, and then the request fails as before.
SLEEP_CHECK_S = 30.0

log = logging.getLogger(__name__)


class EngineRequestError(RuntimeError):
    """This request got no result from the engine."""


class EngineRefusedRequest(EngineRequestError):
    """The engine, alive, answered this request with an error (the others in its batch may be fine)."""


class EngineTimeout(EngineRequestError):
    """The engine did not answer this request within the client's time limit."""


@dataclass(eq=False)
class _Wait:
    """A request under its time limit."""
    fut: asyncio.Future
    request_id: str
    started: float  # loop.time() when it was issued
    timer: asyncio.TimerHandle | None = None
    slept_s: float = 0.0  # of its wait so far, seconds the engine was asleep (as last asked)


class BatchingEngineClient:
    def __init__(self, handle: Any, result_linger_s: float = RESULT_LINGER_S,
                 request_timeout_s: float | None = REQUEST_TIMEOUT_S):
        import ray

        if request_timeout_s is not None and not request_timeout_s > 0:
            raise ValueError(f"request_timeout_s: expected a number of seconds > 0 or None, got {request_timeout_s}")
        self.handle = handle
        self.result_linger_s = result_linger_s
        self.request_timeout_s = request_timeout_s  # None: wait forever
        self.streaming = isinstance(handle, ray.actor.ActorHandle)
        self._pending: list[tuple[tuple, asyncio.Future]] = []
        self._flush_scheduled = False
        self._collectors: set[asyncio.Task] = set()  # held: a bare task may be garbage-collected
        self.calls = 0  # Ray calls made (for tests and stats)
        self.messages = 0  # result messages received on those calls' streams
        self.requests = 0
        self.timeouts = 0  # requests given up on (EngineTimeout)
        self.sleep_extensions = 0  # times a request past its limit waited on because its engine slept
        self._due: dict[str, _Wait] = {}  # past their limit, waiting to learn whether the engine slept
        self._checking = False

    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str,
                       task: str = "") -> GenerationResult:
        self.requests += 1
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        if self.streaming:
            self._pending.append(((token_ids, sampling, request_id, task), fut))
            if not self._flush_scheduled:  # everything issued before the loop turns goes with it
                self._flush_scheduled = True
                loop.call_soon(self._flush)
        else:  # in process: one call; failing or cancelling `fut` stops it
            call = asyncio.ensure_future(self.handle.generate.remote(token_ids, sampling, request_id, task))
            call.add_done_callback(functools.partial(_settle, fut))
            fut.add_done_callback(lambda _: call.cancel())
        if self.request_timeout_s is None:
            return await fut
        # One timer per request, not wait_for: that wraps every request in a task of its own.
        wait = _Wait(fut, request_id, loop.time())
        wait.timer = loop.call_later(self.request_timeout_s, self._expire, wait)
        try:
            return await fut
        finally:
            wait.timer.cancel()  # the latest one: a sleeping engine's requests are re-armed
            self._due.pop(request_id, None)

    def _expire(self, wait: _Wait) -> None:
        """Its limit passed: asks the host whether the engine slept meanwhile (with every
        other request due by then), before giving up on it."""
        if wait.fut.done():
            return
        self._due[wait.request_id] = wait
        if not self._checking:
            self._checking = True
            checker = asyncio.ensure_future(self._check_sleep())
            self._collectors.add(checker)
            checker.add_done_callback(self._collectors.discard)

    async def _check_sleep(self) -> None:
        try:
            while self._due:
                due, self._due = self._due, {}
                try:
                    slept = await asyncio.wait_for(self.handle.slept_during.remote(list(due)),
                                                   min(SLEEP_CHECK_S, self.request_timeout_s))
                except Exception as err:  # noqa: BLE001 - dead, stuck, or unable to say: no time asleep to add
                    log.warning("engine requests %s: could not learn whether their engine slept (%s: %s): "
                                "none of their wait is taken for sleep", list(due)[:3], type(err).__name__, err)
                    slept = {}
                self._settle_due(due, slept)
        finally:
            self._checking = False

    def _settle_due(self, due: dict[str, _Wait], slept: dict[str, float]) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        extended: list[_Wait] = []
        failed: list[_Wait] = []
        for request_id, wait in due.items():
            if wait.fut.done():  # answered or cancelled while the host was asked
                continue
            more = slept.get(request_id, 0.0) - wait.slept_s
            wait.slept_s += max(0.0, more)
            left = self.request_timeout_s - (now - wait.started - wait.slept_s)
            if more > 0 and left > 0:  # the engine slept since the last look: the limit moves on that much
                wait.timer = loop.call_later(left, self._expire, wait)
                extended.append(wait)
            else:  # awake for the whole limit (or unable to say): fails like a dead engine
                wait.fut.set_exception(self._give_up(request_id, wait.slept_s))
                failed.append(wait)
        # One line per check, not per request: a sleep holds every request of the engine.
        if extended:
            self.sleep_extensions += len(extended)
            log.info("%d engine request(s) (%s) past their %gs limit waited on a sleeping engine (asleep %.1f-%.1f s "
                     "of their wait): still waiting, not failed; the limit counts only time the engine is awake",
                     len(extended), _some(extended), self.request_timeout_s,
                     min(w.slept_s for w in extended), max(w.slept_s for w in extended))
        if failed:
            log.warning("%d engine request(s) (%s) got no answer within their %gs limit of the engine awake (time "
                        "asleep not counted): failed as engine failures", len(failed), _some(failed),
                        self.request_timeout_s)

    def _give_up(self, request_id: str, slept_s: float = 0.0) -> EngineTimeout:
        self.timeouts += 1
        # The engine may still hold the request (a slot, its KV cache): drop it there, and
        # make the host prove it serves before anyone routes to it again. Fire and forget:
        # a wedged actor may never answer this either.
        try:
            self.handle.expire.remote(request_id)
        except Exception:  # noqa: BLE001 - gone, or a stand-in without expire: nothing to free
            pass
        asleep = f" of the engine awake (and {slept_s:.1f}s asleep, not counted)" if slept_s > 0 else ""
        return EngineTimeout(f"engine request {request_id}: no answer within {self.request_timeout_s}s{asleep}")

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch = [(req, fut) for req, fut in self._pending if not fut.done()]  # drop cancelled episodes
        self._pending = []
        if not batch:
            return
        self.calls += 1
        waiting = {req[2]: fut for req, fut in batch}
        try:
            stream = self.handle.generate_batch.options(num_returns="streaming").remote(
                [req for req, _ in batch], self.result_linger_s)
        except Exception as err:  # noqa: BLE001 - e.g. the actor is gone: each episode handles it
            _fail(waiting, err)
            return
        collector = asyncio.ensure_future(self._collect(stream, waiting))
        self._collectors.add(collector)
        collector.add_done_callback(self._collectors.discard)

    async def _collect(self, stream: Any, waiting: dict[str, asyncio.Future]) -> None:
        try:
            async for ref in stream:
                self.messages += 1
                for request_id, result, error in await ref:
                    fut = waiting.pop(request_id, None)
                    if fut is None or fut.done():  # its episode was cancelled meanwhile
                        continue
                    if error:
                        fut.set_exception(EngineRefusedRequest(f"engine request {request_id} failed: {error}"))
                    else:
                        fut.set_result(result)
        except Exception as err:  # noqa: BLE001 - the actor died or restarted mid-stream
            _fail(waiting, err)
            return
        _fail(waiting, EngineRequestError("the engine's stream ended without answering these requests"))


def _some(waits: list[_Wait]) -> str:
    return ", ".join(w.request_id for w in waits[:3]) + (", ..." if len(waits) > 3 else "")


def _settle(fut: asyncio.Future, call: asyncio.Future) -> None:
    """Passes an in-process call's outcome on to the request's future (if still waiting)."""
    err = None if call.cancelled() else call.exception()  # retrieved even when no one waits for it
    if fut.done():
        return
    if call.cancelled():
        fut.cancel()
    elif err is not None:
        fut.set_exception(err)
    else:
        fut.set_result(call.result())


def _fail(waiting: dict[str, asyncio.Future], err: BaseException) -> None:
    for fut in waiting.values():
        if not fut.done():
            fut.set_exception(err)
    waiting.clear()
