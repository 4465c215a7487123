"""One serverless reward call has an overall deadline.

Before, retries stopped only when a budget ran out: max_retries read waits
and the throttle budget's backoff (up to 20 s a retry) on top, past the
rollout phase's limit, which then failed the whole job for one reward. Now a
call that reaches its deadline stops retrying (or gives up its running
attempt) and fails as a timed-out reward: ok=False, not deterministic.

The service is a real HTTP server on 127.0.0.1 that keeps answering
retryable errors (or never answers), reached through boto3 as in a run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from roll_agentic.mux.mux_config import MuxConfig
from roll_agentic.reward.lambda_client import (
    ServerlessRewardClient,
    call_deadline_s,
    read_timeout_s,
)
from roll_agentic.reward.outcome import RewardOutcome

SLACK_S = 1.5  # two slow cores shared with other jobs: the bound is the deadline plus this


@asynccontextmanager
async def failing_service(kind: str) -> AsyncIterator[tuple[str, list[float], asyncio.Event]]:
    """A Lambda-like endpoint answering every request with `kind`: 503 (the service failing),
    429 (throttled, Retry-After 0.2 s) or hang (no answer until the returned event is set).
    Yields its URL, the times requests arrived, and that event."""
    arrivals: list[float] = []
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        if kind == "hang":
            await release.wait()
        if kind == "429":
            return web.json_response({"Type": "User", "message": "Rate Exceeded.",
                                      "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded"},
                                     status=429, headers={"x-amzn-ErrorType": "TooManyRequestsException",
                                                          "Retry-After": "0.2"})
        return web.json_response({"Type": "Service", "message": "busy"}, status=503,
                                 headers={"x-amzn-ErrorType": "ServiceException"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", arrivals, release
    finally:
        release.set()  # a hung attempt's thread gets its answer and ends
        await runner.cleanup()


async def _score_against(kind: str, **kwargs) -> tuple[RewardOutcome, float, list[float]]:
    async with failing_service(kind) as (url, arrivals, _):
        client = ServerlessRewardClient(url, **kwargs)
        try:
            t0 = time.monotonic()
            out = await client.score("frozenlake", {"x": 1})
            elapsed = time.monotonic() - t0
            seen = len(arrivals)
            await asyncio.sleep(0.3)  # nothing retries behind the returned call
            assert len(arrivals) == seen
        finally:
            await client.close()
    return out, elapsed, arrivals


@pytest.mark.parametrize("kind", ["503", "429"])
def test_a_call_failing_retryably_stops_at_its_deadline(kind):
    # Without the deadline: 20 server errors backed off up to 1 s each, or 60 throttles each
    # waiting up to 20 s, far past the 1.5 s this call may take.
    out, elapsed, arrivals = asyncio.run(_score_against(
        kind, max_retries=20, backoff_base_s=0.2, backoff_max_s=1.0, deadline_s=1.5))
    assert elapsed < 1.5 + SLACK_S, elapsed
    assert not out.ok and out.value is None and not out.deterministic  # the same as any timed-out reward
    assert "roll-agentic-frozenlake: timed out after 1.5s" in out.error, out.error
    assert ("429" in out.error) if kind == "429" else ("ServiceException" in out.error), out.error
    assert out.retries >= 1 and len(arrivals) >= 2  # it did retry, within the deadline
    if kind == "429":
        assert out.throttles == out.retries + 1


def test_an_attempt_that_hangs_is_given_up_at_the_deadline():
    # The read timeout alone (the function's Timeout + 15 s) would hold the call for 16 s.
    out, elapsed, _ = asyncio.run(_score_against("hang", timeout_s=1.0, deadline_s=1.0))
    assert read_timeout_s(1.0) == 16.0
    assert elapsed < 1.0 + SLACK_S, elapsed
    assert not out.ok and not out.deterministic and "timed out after 1s" in out.error, out.error
    assert "an attempt was still running" in out.error


def test_the_default_deadline_is_what_the_retries_may_take_and_fits_the_phase_limit():
    client = ServerlessRewardClient("http://127.0.0.1:9", timeout_s=30.0, max_retries=4, backoff_max_s=2.0)
    try:
        assert client.limit_s("roll-agentic-x") == 5 * 45.0 + 4 * 2.0  # by reward.timeout_s until known
        client._function_timeouts["roll-agentic-x"] = 120.0  # a function's own Timeout (code_exec)
        assert client.limit_s("roll-agentic-x") == 5 * 135.0 + 4 * 2.0
        assert client.limit_s("roll-agentic-x") < MuxConfig().phase_timeout_s
    finally:
        asyncio.run(client.close())
    assert call_deadline_s(30.0, 0, 2.0) == read_timeout_s(30.0)  # no retries: one full attempt
    given = ServerlessRewardClient("http://127.0.0.1:9", deadline_s=7.0)
    assert given.limit_s("roll-agentic-x") == 7.0
    asyncio.run(given.close())
    with pytest.raises(ValueError, match="deadline_s"):
        ServerlessRewardClient("http://127.0.0.1:9", deadline_s=0.0)
