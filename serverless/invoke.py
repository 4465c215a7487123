"""One invocation end to end: lease, environment, timeout, log, meters; and the Event queue.

The synchronous path is the hot one (a warm invoke should cost a few ms):
a dict lookup for the lease, a pop from the ready stack, one pipe round trip
to the worker and a formatted REPORT line. Event invocations are queued and
run in the background; a failing one is retried up to twice more (AWS waits
1 and 2 minutes; the emulator waits `event_retry_delay_s` and twice that)
and a throttled one waits and tries again without using up an attempt for as
long as the event is younger than `max_event_age_s` (AWS's default maximum
event age, 6 hours): then it is dropped, with an `EVENT ... dropped` line in
the function's log and its `async_events_dropped` meter counted. At most
`max_events_in_flight` events run at once; an event holds its slot only for
an attempt, never while it waits, so one throttled function's backlog does
not stall the events of all the others.
The queue is bounded (`max_event_backlog` invocations, `max_event_backlog_mb`
of payloads): past that an Event is refused with a 429, which boto3 retries,
instead of the emulator growing until the machine runs out of memory.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from serverless import errors
from serverless.concurrency import ConcurrencyLimiter
from serverless.environments import EnvironmentPool, InitError, WorkerDied, handler_timeout_s
from serverless.functions import FunctionRecord, FunctionStore
from serverless.logfiles import LOG_MAX_BYTES, FunctionLogs
from serverless.meters import Meters

LOG_TAIL_BYTES = 4096
MAX_RESPONSE_BYTES = 6291556  # Lambda's limit on a synchronous response, as its error message states
EVENT_MAX_ATTEMPTS = 3  # the first try and two retries
EVENT_CODE_POLL_S = 0.05  # how often an event waiting out a code update looks again
EVENT_MAX_AGE_S = 6 * 3600.0  # Lambda's default MaximumEventAgeInSeconds
EVENT_THROTTLE_WAIT_MAX_S = 2.0  # a throttled event tries again at least this often
EVENT_BACKLOG_REASON = "EventQueueFull"  # the emulator's own Reason: AWS's queue has no limit it states


@dataclass
class InvokeResult:
    request_id: str
    payload: bytes
    function_error: str | None  # "Unhandled" when the function failed, else None
    log: str  # this invocation's log, START to REPORT
    cold: bool

    def log_tail_b64(self) -> str:
        # errors="replace": a handler may print a lone surrogate ("\ud800"), which UTF-8 cannot encode
        return base64.b64encode(self.log.encode(errors="replace")[-LOG_TAIL_BYTES:]).decode()


def _report(rid: str, duration_ms: float, billed: int, memory_mb: int, used_mb: int, init_ms: float | None) -> str:
    line = (
        f"REPORT RequestId: {rid}\tDuration: {duration_ms:.2f} ms\tBilled Duration: {billed} ms\t"
        f"Memory Size: {memory_mb} MB\tMax Memory Used: {used_mb} MB\t"
    )
    if init_ms is not None:
        line += f"Init Duration: {init_ms:.2f} ms\t"
    return line + "\n"


class Invoker:
    def __init__(
        self,
        store: FunctionStore,
        pool: EnvironmentPool,
        limiter: ConcurrencyLimiter,
        meters: Meters,
        log_dir: Path,
        event_retry_delay_s: float = 1.0,
        max_events_in_flight: int = 64,
        max_event_backlog: int = 10_000,
        max_event_backlog_mb: float = 256.0,
        max_event_age_s: float = EVENT_MAX_AGE_S,
        log_max_bytes: int = LOG_MAX_BYTES,
    ) -> None:
        self.store, self.pool, self.limiter, self.meters = store, pool, limiter, meters
        self.log_dir = Path(log_dir)
        self.event_retry_delay_s = event_retry_delay_s
        self._event_slots = asyncio.Semaphore(max_events_in_flight)
        self._event_tasks: set[asyncio.Task] = set()
        self.max_event_backlog = max_event_backlog
        self.max_event_backlog_bytes = int(max_event_backlog_mb * 1024 * 1024)
        self._event_bytes = 0  # payload bytes of the Events queued or running
        self.max_event_age_s = max_event_age_s
        self.logs = FunctionLogs(self.log_dir, log_max_bytes)

    # -- synchronous ----------------------------------------------------------

    async def invoke(self, rec: FunctionRecord, payload: str, request_id: str | None = None,
                     client_context: dict | None = None) -> InvokeResult:
        """Runs the function once (under `request_id`, else a new one); raises a 429
        LambdaError when throttled."""
        meter = self.meters.of(rec.name)
        try:
            lease = self.limiter.acquire(rec.name)
        except errors.LambdaError:
            meter.throttles += 1
            raise
        try:
            return await self._run(rec, payload, request_id or str(uuid.uuid4()), client_context)
        finally:
            self.limiter.release(lease)

    async def _run(self, rec: FunctionRecord, payload: str, rid: str, client_context: dict | None = None) -> InvokeResult:
        meter = self.meters.of(rec.name)
        try:
            env, cold = await self.pool.acquire(rec, self.store.code_dir(rec))
        except InitError as e:
            # Lambda reports a failed init on the invocation that triggered it.
            error = {**e.error, "requestId": rid}
            log = f"START RequestId: {rid} Version: $LATEST\n{e.error.get('errorType')}: {e.error.get('errorMessage')}\n"
            billed = meter.record(0.0, rec.memory_mb, True, e.init_ms, error=True)
            log += f"END RequestId: {rid}\n" + _report(rid, 0.0, billed, rec.memory_mb, 0, e.init_ms)
            return self._finish(rec, rid, _json(error), "Unhandled", log, True)
        # After a cold start whose init ran past its limit, the handler has what is left of its Timeout.
        budget_s = handler_timeout_s(float(rec.timeout_s), env.init_ms if cold else None)
        msg = {"id": rid, "payload": payload, "deadline": time.time() + budget_s, "client_context": client_context}
        error: dict | None = None
        body = b""
        logs = ""
        used_mb = 0
        try:
            reply = await env.invoke(msg, budget_s)
            duration_ms, used_mb, logs = reply["duration_ms"], reply["max_rss_mb"], reply["logs"]
            if reply.get("fatal"):
                env.kill()  # the worker exits after a MemoryError; never hand it another request
            if used_mb > rec.memory_mb:
                env.kill()  # Lambda stops an environment that went over its memory
                error = {"errorType": "Runtime.OutOfMemory", "errorMessage": f"RequestId: {rid} Error: Runtime exited with error: signal: killed (Max Memory Used {used_mb} MB > MemorySize {rec.memory_mb} MB)"}
            elif reply["ok"]:
                # bytes a handler returned travel base64-encoded and go back as they are
                body = base64.b64decode(reply["payload"]) if reply.get("raw") else reply["payload"].encode()
                if len(body) > MAX_RESPONSE_BYTES:
                    body = b""
                    error = {"errorType": "Function.ResponseSizeTooLarge", "errorMessage": f"Response payload size exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes)."}
            else:
                error = reply["payload"]
        except TimeoutError:
            meter.timeouts += 1
            duration_ms = budget_s * 1000.0
            logs = f"{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime())} {rid} Task timed out after {rec.timeout_s:.2f} seconds\n"
            error = {"errorType": "Sandbox.Timedout", "errorMessage": f"RequestId: {rid} Error: Task timed out after {rec.timeout_s:.2f} seconds"}
        except WorkerDied as e:
            duration_ms = 0.0
            error = {"errorType": "Runtime.ExitError", "errorMessage": f"RequestId: {rid} Error: Runtime exited with error: {e}"}
        except Exception as e:  # noqa: BLE001 - a malformed reply (ProtocolError, a missing field)
            # The environment is out of step with the protocol: stopped, never returned to the pool
            # (its next reply would answer another request), and the caller told it was the service.
            env.kill()
            meter.errors += 1
            raise errors.service_error(f"RequestId: {rid} the execution environment failed: {type(e).__name__}: {e}") from e
        finally:
            current = self.store.functions.get(rec.name)
            self.pool.release(env, current.environment_tag if current is not None else None)
            if current is not None and env.code_tag != current.code_tag:
                self.store.prune_code(current, self.pool.code_in_use(rec.name))  # its old code
        if error is not None:
            error.setdefault("requestId", rid)
            body = _json(error)
        init_ms = env.init_ms if cold else None
        billed = meter.record(duration_ms, rec.memory_mb, cold, env.init_ms, error=error is not None)
        log = (
            f"START RequestId: {rid} Version: $LATEST\n{logs}END RequestId: {rid}\n"
            + _report(rid, duration_ms, billed, rec.memory_mb, used_mb, init_ms)
        )
        return self._finish(rec, rid, body, "Unhandled" if error is not None else None, log, cold)

    def _finish(self, rec: FunctionRecord, rid: str, body: bytes, ferr: str | None, log: str, cold: bool) -> InvokeResult:
        self.logs.write(rec.name, log)
        return InvokeResult(rid, body, ferr, log, cold)

    def forget(self, name: str) -> None:
        self.logs.forget(name)

    # -- asynchronous (InvocationType=Event) ----------------------------------

    def submit_event(self, name: str, payload: str) -> str:
        """Queues an Event invocation and returns its request id; a 429 LambdaError
        when the queue is full (by count or by payload bytes)."""
        size = len(payload.encode())
        pending = len(self._event_tasks)
        if pending >= self.max_event_backlog or self._event_bytes + size > self.max_event_backlog_bytes:
            raise errors.throttled(
                EVENT_BACKLOG_REASON,
                message=(
                    f"the emulator's Event queue is full ({pending} invocations, "
                    f"{self._event_bytes / 2**20:.1f} MB of payloads waiting or running; limits "
                    f"{self.max_event_backlog} and {self.max_event_backlog_bytes / 2**20:g} MB): retry "
                    "later, or start it with a larger --max-event-backlog / --max-event-backlog-mb"
                ),
            )
        rid = str(uuid.uuid4())  # the caller's, the function's and the log's, retries included
        task = asyncio.get_running_loop().create_task(self._run_event(name, payload, rid))
        self._event_tasks.add(task)
        self._event_bytes += size

        def done(t: asyncio.Task) -> None:
            self._event_tasks.discard(t)
            self._event_bytes -= size

        task.add_done_callback(done)
        return rid

    @property
    def events_pending(self) -> int:
        return len(self._event_tasks)

    async def _run_event(self, name: str, payload: str, rid: str) -> None:
        submitted = time.monotonic()
        attempts, waits = 0, 0
        while attempts < EVENT_MAX_ATTEMPTS:
            if not await self._wait_for_code(name, rid, submitted):
                return
            try:
                # A slot for the attempt only: held through the waits below, 64 throttled events
                # of one function stalled every other function's events for minutes.
                async with self._event_slots:
                    rec = self.store.functions.get(name)
                    if rec is None:
                        return  # deleted while queued: nothing to run
                    if rec.state != "Active":
                        raise RuntimeError(f"the function is {rec.state}: its code could not be unpacked")
                    failed = (await self.invoke(rec, payload, rid)).function_error is not None
            except Exception as e:  # noqa: BLE001 - an Event has no caller to answer
                if isinstance(e, errors.LambdaError) and e.status == 429:  # throttled: it never ran
                    waits += 1
                    if not await self._wait_throttled(name, rid, submitted, waits, e):
                        return
                    continue
                # It could not run at all (e.g. no code to start after a failed update):
                # a failed attempt, logged and retried. The task died unseen before
                # ("Task exception was never retrieved") and the event was lost.
                self.meters.of(name).errors += 1
                self.logs.write(name, f"EVENT RequestId: {rid} could not run: {type(e).__name__}: {e}\n")
                failed = True
            attempts += 1
            if not failed:
                return
            if attempts < EVENT_MAX_ATTEMPTS:
                self.meters.of(name).event_retries += 1
                await asyncio.sleep(self.event_retry_delay_s * attempts)

    async def _wait_for_code(self, name: str, rid: str, submitted: float) -> bool:
        """Waits, holding no slot and spending no attempt, while an update of the function is under
        way: UpdateFunctionCode switches it to code unpacked only at activation, a transition later,
        while its state stays Active; a retry in that gap started a worker in a folder not there yet
        (FileNotFoundError), and the event was dropped after its attempts. What the server's _ready
        does for a synchronous invoke. False once the event is past `max_event_age_s` (dropped, logged)."""
        while True:
            rec = self.store.functions.get(name)
            if rec is None or rec.state != "Active":
                return True  # deleted, or its update failed: the attempt says so
            if rec.last_update_status != "InProgress" and self.store.code_dir(rec).is_dir():
                return True
            age_s = time.monotonic() - submitted
            if age_s >= self.max_event_age_s:
                self.meters.of(name).async_events_dropped += 1
                self.logs.write(name, f"EVENT RequestId: {rid} dropped: its function's update was still in "
                                      f"progress after {age_s:.1f} s, past the maximum event age of "
                                      f"{self.max_event_age_s:g} s\n")
                return False
            await asyncio.sleep(min(EVENT_CODE_POLL_S, self.max_event_age_s - age_s))

    async def _wait_throttled(self, name: str, rid: str, submitted: float, waits: int, e: Exception) -> bool:
        """Waits before a throttled event's next try (no slot held); False once the event is
        older than `max_event_age_s`: then it is dropped, logged and counted."""
        age_s = time.monotonic() - submitted
        if age_s >= self.max_event_age_s:
            # Lambda drops such an event too (its AsyncEventsDropped metric); here it
            # went without a trace, so a caller's lost reward looked like a hang.
            self.meters.of(name).async_events_dropped += 1
            self.logs.write(name, f"EVENT RequestId: {rid} dropped: throttled {waits} times over {age_s:.1f} s, "
                                  f"past the maximum event age of {self.max_event_age_s:g} s (last: {e})\n")
            return False
        await asyncio.sleep(min(EVENT_THROTTLE_WAIT_MAX_S, 0.05 * 2 ** min(waits, 6), self.max_event_age_s - age_s))
        return True

    async def close(self) -> None:
        for task in list(self._event_tasks):
            task.cancel()
        for task in list(self._event_tasks):
            with contextlib.suppress(BaseException):
                await task
        self.logs.close()


def _json(obj: dict) -> bytes:
    return json.dumps(obj).encode()
