"""Rewards computed by Lambda functions (AWS or the local emulator) through boto3.

boto3 is told not to retry (`total_max_attempts=1`): this client retries
itself, with exponential backoff and jitter, on what is worth retrying (5xx,
transport timeouts and function timeouts) up to `max_retries`, and counts
throttles and retries for the trainer's metrics. A throttle (429) has a
budget and a backoff of its own (`max_throttle_retries`, by default three
times `max_retries`; from 0.5 s doubling to 20 s, never sooner than the
service's Retry-After): a throttled call never ran, and a burst against a
busy account needs seconds to clear, where the general backoff (0.75 s in
all) gave up on it while the function had capacity again moments later.
boto3 is synchronous, so calls run in a thread pool as wide as the
concurrency bound. The Tail log's REPORT line gives the billed duration, the
memory size (for GB-seconds) and, on a cold start, `Init Duration`.

One call has an overall deadline (`deadline_s`, by default `call_deadline_s`
of the function's Timeout): the throttle budget alone could add minutes of
backoff on top of max_retries full read waits, past the rollout phase's limit
(mux phase_timeout_s, 900 s by default), which then failed the whole job for
one reward. Once the next wait would end past the deadline the call stops
retrying, and an attempt still running then is given up; either is a failed
reward that "timed out after" (ok=False, not deterministic), as the local
client reports one, so the trajectory is left out and the run goes on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from roll_agentic import faults
from roll_agentic.failures import deterministic_type_name
from roll_agentic.reward.outcome import RewardOutcome, parse_reward
from roll_agentic.reward.reward_ref import function_stem

# A client's read timeout is the function's Timeout plus these two allowances.
# On a cold start AWS first runs the function's Init phase (extensions, the
# runtime, the handler module's imports and top-level code), and the
# function's Timeout starts counting only after it: "The Init phase is limited
# to 10 seconds" (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html;
# past 10 s Init is retried inside the invocation, under the Timeout). Without
# the allowance a cold invocation of a function with a short Timeout was cut
# off client-side while AWS would still answer, and the retry ran it again.
LAMBDA_INIT_ALLOWANCE_S = 10.0
# The rest of the round trip beyond the function's run: network, queueing in
# the service, the response's transfer.
READ_TIMEOUT_SLACK_S = 5.0

_BILLED = re.compile(r"Billed Duration: ([\d.]+) ms")
_MEMORY = re.compile(r"Memory Size: (\d+) MB")
_INIT = re.compile(r"Init Duration: ([\d.]+) ms")
# AWS has answered a timeout both as errorType Sandbox.Timedout and with only an errorMessage
# "<date> <request id> Task timed out after 3.00 seconds" (no errorType).
_TIMED_OUT = re.compile(r"Task timed out after [\d.]+ seconds")


def is_function_timeout(error_type: str, error_message: str) -> bool:
    """Whether a function error is Lambda's timeout, in either of the forms it takes."""
    return error_type == "Sandbox.Timedout" or bool(_TIMED_OUT.search(error_message or ""))


def retry_after_s(response: dict) -> float | None:
    """The service's Retry-After (seconds or an HTTP date) from a ClientError's response, else None."""
    raw = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("retry-after")
    if raw is None:
        raw = response.get("retryAfterSeconds")  # the modelled member botocore parses it into
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        try:
            value = parsedate_to_datetime(str(raw)).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    return max(0.0, value) if math.isfinite(value) else None


def read_timeout_s(function_timeout_s: float) -> float:
    """How long a client waits for an Invoke of a function whose Timeout is `function_timeout_s`."""
    return float(function_timeout_s) + LAMBDA_INIT_ALLOWANCE_S + READ_TIMEOUT_SLACK_S


def call_deadline_s(function_timeout_s: float, max_retries: int, backoff_max_s: float) -> float:
    """The default limit on one score() call: what its general retries may take at most, i.e.
    every attempt waiting out its full read timeout plus each backoff at its cap.

    Throttle retries fit inside it rather than add to it: at the defaults (Timeout 30 s, 4
    retries) that is 233 s, and 683 s for a 120 s function (code_exec), both under the
    rollout phase's 900 s, where the throttle budget on top reached past it."""
    return (max_retries + 1) * read_timeout_s(function_timeout_s) + max_retries * backoff_max_s


@dataclass
class Report:
    billed_ms: float = 0.0
    memory_mb: int = 0
    init_ms: float | None = None


def parse_report(log_b64: str | None) -> Report:
    """Billed duration, memory size and init duration from a Tail log's REPORT line."""
    if not log_b64:
        return Report()
    text = base64.b64decode(log_b64).decode(errors="replace")
    line = next((ln for ln in reversed(text.splitlines()) if ln.startswith("REPORT ")), "")
    billed, mem, init = _BILLED.search(line), _MEMORY.search(line), _INIT.search(line)
    return Report(
        billed_ms=float(billed.group(1)) if billed else 0.0,
        memory_mb=int(mem.group(1)) if mem else 0,
        init_ms=float(init.group(1)) if init else None,
    )


@dataclass
class _Attempts:
    retries: int = 0  # all of them, throttles' included (the trainer's metric)
    throttle_retries: int = 0  # those after a throttle, counted against max_throttle_retries
    throttles: int = 0
    throttled: bool = False  # the last attempt was throttled
    retry_after_s: float | None = None  # and the service said when to come back
    cold: bool = False
    billed_ms: float = 0.0
    gb_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    # The last attempt failed in the function's own code (it raised, returned no number), which
    # the next call would meet again; not a throttle, a timeout or the service (failures.py).
    deterministic: bool = False

    @property
    def other_retries(self) -> int:
        """The retries after anything but a throttle, counted against max_retries."""
        return self.retries - self.throttle_retries


def _backoff_s(base: float, cap: float, n: int) -> float:
    """The wait before the `n`-th retry: exponential from `base`, at most `cap`, with jitter
    (one random draw) that spreads a burst of retries."""
    return min(cap, base * 2 ** (n - 1)) * random.uniform(0.5, 1.0)


class ServerlessRewardClient:
    def __init__(
        self,
        endpoint_url: str | None,
        region: str = "us-east-1",
        function_prefix: str = "roll-agentic-",
        max_concurrency: int = 16,
        max_retries: int = 4,
        timeout_s: float = 30.0,
        backoff_base_s: float = 0.05,
        backoff_max_s: float = 2.0,
        client: Any = None,
        max_throttle_retries: int | None = None,  # None: 3 x max_retries (0 stays "never retry")
        throttle_backoff_base_s: float = 0.5,
        throttle_backoff_max_s: float = 20.0,
        deadline_s: float | None = None,  # one call's limit, from its slot on; None: call_deadline_s
    ) -> None:
        if deadline_s is not None and not deadline_s > 0:
            raise ValueError(f"deadline_s: expected a number of seconds > 0 or None, got {deadline_s!r}")
        self.deadline_s = deadline_s
        self.prefix = function_prefix
        self.max_retries = max_retries
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.max_throttle_retries = 3 * max_retries if max_throttle_retries is None else max_throttle_retries
        self.throttle_backoff_base_s, self.throttle_backoff_max_s = throttle_backoff_base_s, throttle_backoff_max_s
        self._endpoint_url, self._region, self._max_concurrency = endpoint_url, region, max_concurrency
        self._default_timeout_s = timeout_s
        self._fixed_client = client
        self._clients: dict[float, Any] = {}  # read timeout: a client that waits that long
        self._function_timeouts: dict[str, float] = {}
        self._clients_lock = threading.Lock()
        self._client = client or self._client_waiting(timeout_s)
        self._sem = asyncio.Semaphore(max_concurrency)
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="reward-invoke")
        self._invoke_once = faults.invoke_fn(self._invoke)  # `self._invoke` unless faults are on

    def function_name(self, function: str) -> str:
        return self.prefix + function_stem(function)  # my_pkg.scoring is deployed as <prefix>scoring

    def _client_waiting(self, timeout_s: float) -> Any:
        """A client whose reads wait out a function of this Timeout, cold start included (`read_timeout_s`)."""
        from serverless.deploy import lambda_client

        wait_s = read_timeout_s(timeout_s)
        with self._clients_lock:
            if wait_s not in self._clients:
                self._clients[wait_s] = lambda_client(
                    self._endpoint_url, self._region, read_timeout_s=wait_s,
                    max_pool_connections=self._max_concurrency, max_attempts=1,
                )
            return self._clients[wait_s]

    def _client_for(self, name: str) -> Any:
        """The client to invoke `name` with: it waits as long as the function may run.

        A reward declares its own Timeout (code_exec: 120 s). A client that
        gave up at `timeout_s` (30 s) could never see a slower one succeed,
        and each retry ran it again beside the one still running. The
        function's Timeout is asked once (GetFunctionConfiguration); where
        the service does not say (no permission, say), `timeout_s` stands.
        """
        if self._fixed_client is not None:
            return self._fixed_client
        timeout_s = self._function_timeouts.get(name)
        if timeout_s is None:
            try:
                timeout_s = float(self._client.get_function_configuration(FunctionName=name)["Timeout"])
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    return self._client  # the Invoke says so; ask again once it exists
                timeout_s = self._default_timeout_s
            except Exception:  # noqa: BLE001 - a transport failure: the Invoke meets it too
                return self._client
            timeout_s = max(timeout_s, self._default_timeout_s)
            self._function_timeouts[name] = timeout_s
        return self._client_waiting(timeout_s)

    def _invoke(self, name: str, payload: bytes) -> tuple[dict, bytes]:
        resp = self._client_for(name).invoke(FunctionName=name, InvocationType="RequestResponse", LogType="Tail", Payload=payload)
        return resp, resp["Payload"].read()

    def limit_s(self, name: str) -> float:
        """How long one call of `name` may take in all: `deadline_s`, else what its retries may
        take (`call_deadline_s`) by the function's Timeout once known, else by `timeout_s`."""
        if self.deadline_s is not None:
            return self.deadline_s
        timeout_s = self._function_timeouts.get(name, self._default_timeout_s)
        return call_deadline_s(timeout_s, self.max_retries, self.backoff_max_s)

    async def score(self, function: str, summary: dict) -> RewardOutcome:
        t0 = time.monotonic()
        name = self.function_name(function)
        try:
            payload = json.dumps(summary).encode()
        except (TypeError, ValueError) as e:
            return RewardOutcome(None, False, 0.0, 0, False, 0, 0.0, 0.0, f"the summary is not JSON-serialisable: {e}",
                                 deterministic=True)
        a = _Attempts()
        loop = asyncio.get_running_loop()
        async with self._sem:
            # The clock starts with the slot: time queued behind other calls is bounded by
            # theirs, and counting it here failed calls that never got to try.
            started = time.monotonic()

            def timed_out(last: str) -> RewardOutcome:
                # Read at the end: the first attempt may have learnt the function's Timeout.
                error = f"{name}: timed out after {self.limit_s(name):g}s ({a.retries + 1} attempts); last: {last}"
                return RewardOutcome(None, False, time.monotonic() - t0, a.retries, a.cold, a.throttles, a.billed_ms,
                                     a.gb_s, error)

            while True:
                left = started + self.limit_s(name) - time.monotonic()
                try:
                    # A hung attempt is given up at the deadline; its thread runs on to the read
                    # timeout (threads cannot be stopped), and the pool serves other calls meanwhile.
                    value, error, retryable = await asyncio.wait_for(self._attempt(loop, name, payload, a), left)
                except TimeoutError:
                    return timed_out("an attempt was still running")
                if value is not None:
                    return RewardOutcome(value, True, time.monotonic() - t0, a.retries, a.cold, a.throttles, a.billed_ms, a.gb_s)
                a.errors.append(error)
                if a.throttled:
                    budget_left = a.throttle_retries < self.max_throttle_retries
                else:
                    budget_left = a.other_retries < self.max_retries
                if not retryable or not budget_left:
                    if retryable:
                        error = f"gave up after {a.retries + 1} attempts; last: {error}"
                    return RewardOutcome(None, False, time.monotonic() - t0, a.retries, a.cold, a.throttles, a.billed_ms,
                                         a.gb_s, f"{name}: {error}", deterministic=a.deterministic and not retryable)
                if a.throttled:
                    delay = self.throttle_delay_s(a.throttle_retries + 1, a.retry_after_s)
                else:
                    delay = _backoff_s(self.backoff_base_s, self.backoff_max_s, a.other_retries + 1)
                # Near the deadline: a retry that could only start at or past it is not made.
                if time.monotonic() + delay >= started + self.limit_s(name):
                    return timed_out(error)
                a.retries += 1
                if a.throttled:
                    a.throttle_retries += 1
                await asyncio.sleep(delay)

    def throttle_delay_s(self, n: int, retry_after: float | None) -> float:
        """The wait before the `n`-th retry after a throttle: exponential with jitter, and
        not before the service's Retry-After (a little after it, so that a burst throttled
        together does not come back at the same instant); at most throttle_backoff_max_s."""
        cap = self.throttle_backoff_max_s
        delay = _backoff_s(self.throttle_backoff_base_s, cap, n)
        if retry_after is not None:
            delay = max(delay, retry_after * random.uniform(1.0, 1.2))
        return min(cap, delay)

    async def _attempt(self, loop, name: str, payload: bytes, a: _Attempts) -> tuple[float | None, str, bool]:
        """One Invoke; returns (value, error, retryable). `a.deterministic` says whether
        a failure was the function's own (failures.py)."""
        a.deterministic, a.throttled, a.retry_after_s = False, False, None
        try:
            resp, body = await loop.run_in_executor(self._pool, self._invoke_once, name, payload)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            msg = e.response.get("Error", {}).get("Message", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code == "TooManyRequestsException" or status == 429:
                a.throttles += 1
                a.throttled, a.retry_after_s = True, retry_after_s(e.response)
                reason = e.response.get("Reason", "") or e.response.get("Error", {}).get("Reason", "")
                return None, f"throttled (429 {reason or code})", True
            return None, f"{code}: {msg}", status >= 500
        except (ReadTimeoutError, ConnectTimeoutError, ConnectionClosedError, EndpointConnectionError,
                HTTPClientError, BotoConnectionError) as e:  # any transport failure: e.g. a restarting service
            return None, f"{type(e).__name__}: {e}", True
        report = parse_report(resp.get("LogResult"))
        a.cold = a.cold or report.init_ms is not None
        a.billed_ms += report.billed_ms
        a.gb_s += report.billed_ms / 1000.0 * report.memory_mb / 1024.0
        try:
            result = json.loads(body) if body else None
        except ValueError:
            a.deterministic = True
            return None, f"the function returned a payload that is not JSON: {body[:200]!r}", False
        if resp.get("FunctionError"):
            etype = result.get("errorType", "") if isinstance(result, dict) else ""
            emsg = result.get("errorMessage", "") if isinstance(result, dict) else str(result)
            # The function's own exception (its type is all that travels): a KeyError recurs on every
            # call, a ConnectionError (a service it calls is down) or the runtime's exit may pass.
            a.deterministic = deterministic_type_name(etype)
            # A function timeout may be a cold start or a busy host: worth another try.
            return None, f"function error ({resp['FunctionError']}) {etype}: {emsg}", is_function_timeout(etype, str(emsg))
        value, err = parse_reward(result)
        a.deterministic = bool(err)
        return value, err, False

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in {id(c): c for c in (self._client, *self._clients.values())}.values():
            client.close()
