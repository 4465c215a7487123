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
"""

from __future__ import annotations

import asyncio
from typing import Any

from roll_agentic.engine.protocol import GenerationResult, SamplingParams

# About one decode step of a full batch on 2 CPU cores: a turn's reply arrives
# at most this much later, and only while other requests of its batch still run.
RESULT_LINGER_S = 0.01
# No answer within this long means the engine is wedged, not slow: far above a
# long-tail reply (thousands of tokens) on a loaded engine, far below forever.
REQUEST_TIMEOUT_S = 600.0


class EngineRequestError(RuntimeError):
    """This request got no result from the engine."""


class EngineRefusedRequest(EngineRequestError):
    """The engine, alive, answered this request with an error (the others in its batch may be fine)."""


class EngineTimeout(EngineRequestError):
    """The engine did not answer this request within the client's time limit."""


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

    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str,
                       task: str = "") -> GenerationResult:
        self.requests += 1
        if not self.streaming:
            try:
                return await asyncio.wait_for(self.handle.generate.remote(token_ids, sampling, request_id, task),
                                              self.request_timeout_s)
            except TimeoutError:
                raise self._give_up(request_id) from None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._pending.append(((token_ids, sampling, request_id, task), fut))
        if not self._flush_scheduled:  # everything issued before the loop turns goes with it
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        # One timer per request, not wait_for: that wraps every request in a task of its own.
        timer = (loop.call_later(self.request_timeout_s, self._expire, fut, request_id)
                 if self.request_timeout_s is not None else None)
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()

    def _expire(self, fut: asyncio.Future, request_id: str) -> None:
        if not fut.done():
            fut.set_exception(self._give_up(request_id))

    def _give_up(self, request_id: str) -> EngineTimeout:
        self.timeouts += 1
        # The engine may still hold the request (a slot, its KV cache): drop it there, and
        # make the host prove it serves before anyone routes to it again. Fire and forget:
        # a wedged actor may never answer this either.
        try:
            self.handle.expire.remote(request_id)
        except Exception:  # noqa: BLE001 - gone, or a stand-in without expire: nothing to free
            pass
        return EngineTimeout(f"engine request {request_id}: no answer within {self.request_timeout_s}s")

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


def _fail(waiting: dict[str, asyncio.Future], err: BaseException) -> None:
    for fut in waiting.values():
        if not fut.done():
            fut.set_exception(err)
    waiting.clear()
