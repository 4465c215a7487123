"""The serverless reward client's retries: throttles wait longer, as the service says, and
for longer; a timeout is recognised in both forms AWS answers it in.

The service is stubbed (no network) except in the last test, which reads a real 429 from the
emulator on 127.0.0.1. Sleeps are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import json
from email.utils import formatdate

import pytest
from botocore.exceptions import ClientError

from roll_agentic.reward.lambda_client import (
    ServerlessRewardClient,
    is_function_timeout,
    retry_after_s,
)


class _NoCallClient:
    def close(self) -> None:
        pass


def _throttle(retry_after: str | None = None) -> ClientError:
    headers = {} if retry_after is None else {"retry-after": retry_after}
    return ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate Exceeded."},
                        "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded",
                        "ResponseMetadata": {"HTTPStatusCode": 429, "HTTPHeaders": headers}}, "Invoke")


def _server_error() -> ClientError:
    return ClientError({"Error": {"Code": "ServiceException", "Message": "boom"},
                        "ResponseMetadata": {"HTTPStatusCode": 500, "HTTPHeaders": {}}}, "Invoke")


@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """The delays the client asked to sleep; each returns at once."""
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def record(delay: float, *args, **kwargs):
        delays.append(delay)
        return await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", record)
    return delays


def _score(outcomes: list, **kwargs):
    """Scores once against a service answering `outcomes` in turn (a ClientError is raised,
    a (resp, body) pair returned); returns the outcome and how many calls were made."""
    calls = []

    def invoke(name: str, payload: bytes):
        out = outcomes[min(len(calls), len(outcomes) - 1)]
        calls.append(name)
        if isinstance(out, Exception):
            raise out
        return out

    async def main():
        client = ServerlessRewardClient(None, client=_NoCallClient(), **kwargs)
        client._invoke_once = invoke
        try:
            return await client.score("env_return", {"x": 1})
        finally:
            await client.close()

    return asyncio.run(main()), len(calls)


OK = ({}, b'{"reward": 0.5}')


def test_throttles_have_a_larger_budget_and_wait_for_retry_after(slept):
    """Throttles shared max_retries and a backoff of 0.75 s in all: a burst gave up on a
    function that had capacity again moments later, and Retry-After went unread."""
    out, calls = _score([_throttle("3")] * 6 + [OK], max_retries=2)
    assert out.ok and out.value == 0.5 and out.throttles == 6 and calls == 7
    assert len(slept) == 6 and all(3.0 <= d <= 20.0 for d in slept), slept


def test_throttles_without_retry_after_back_off_from_half_a_second_to_a_cap(slept):
    out, calls = _score([_throttle()], max_retries=3)  # throttled every time
    assert not out.ok and calls == 3 * 3 + 1 and out.throttles == 10 and "gave up after 10 attempts" in out.error
    assert 0.25 <= slept[0] <= 0.5 and 0.5 <= slept[1] <= 1.0  # jittered: half to all of 0.5 x 2^n
    assert max(slept) <= 20.0 and slept[-1] >= 10.0  # up to the cap
    client = ServerlessRewardClient(None, client=_NoCallClient())
    assert client.throttle_delay_s(1, 100.0) == 20.0  # a Retry-After past the cap waits the cap
    asyncio.run(client.close())


def test_max_retries_zero_still_means_no_retry_and_other_retries_are_unchanged(slept):
    out, calls = _score([_throttle("1")], max_retries=0)
    assert not out.ok and calls == 1 and slept == []
    out, calls = _score([_server_error()], max_retries=2)
    assert not out.ok and calls == 3 and "gave up after 3 attempts" in out.error
    assert all(d <= 2.0 for d in slept) and slept[0] <= 0.05  # the general backoff: from 0.05 s, at most 2 s
    out, calls = _score([_throttle(), _server_error(), _throttle(), OK], max_retries=1)  # separate budgets
    assert out.ok and calls == 4


def test_retry_after_is_read_as_seconds_or_a_date():
    assert retry_after_s({"ResponseMetadata": {"HTTPHeaders": {"retry-after": "2"}}}) == 2.0
    assert retry_after_s({"retryAfterSeconds": "4", "ResponseMetadata": {"HTTPHeaders": {}}}) == 4.0
    now = retry_after_s({"ResponseMetadata": {"HTTPHeaders": {"retry-after": formatdate(usegmt=True)}}})
    assert now is not None and 0.0 <= now <= 1.0  # a date now or past: come back at once
    for bad in ("soon", "nan", "inf"):
        assert retry_after_s({"ResponseMetadata": {"HTTPHeaders": {"retry-after": bad}}}) is None
    assert retry_after_s({}) is None
    assert retry_after_s({"ResponseMetadata": {"HTTPHeaders": {"retry-after": "-3"}}}) == 0.0


def test_a_timeout_answered_with_only_a_message_is_retried(slept):
    """AWS has also answered a timeout with no errorType, only the message; it was taken for
    the function's own error and not retried."""
    timed_out = ({"FunctionError": "Unhandled"},
                 json.dumps({"errorMessage": "2024-05-01T10:00:00.000Z 6a1b... Task timed out after 3.00 seconds"}).encode())
    out, calls = _score([timed_out, OK], max_retries=2)
    assert out.ok and out.retries == 1 and calls == 2
    assert is_function_timeout("Sandbox.Timedout", "")
    assert is_function_timeout("", "RequestId: x Error: Task timed out after 120.00 seconds")
    assert not is_function_timeout("ValueError", "the task timed out on its own terms")


def test_the_emulators_retry_after_reaches_the_throttle_backoff(tmp_path, slept):
    """A real 429 through boto3: Retry-After (1 s from the emulator) comes through the parser."""
    from roll_agentic.reward.service import LocalServerless
    from serverless.deploy import lambda_client
    from tests.serverless.conftest import create, make_zip

    with LocalServerless() as svc:
        url = svc.start(tmp_path / "state")
        c = lambda_client(url)
        create(c, "roll-agentic-held", make_zip({"app.py": "def handler(e, c):\n    return {'reward': 1.0}\n"}),
               handler="app.handler")
        c.put_function_concurrency(FunctionName="roll-agentic-held", ReservedConcurrentExecutions=0)
        c.close()

        async def main():
            client = ServerlessRewardClient(url, max_retries=1, max_throttle_retries=2)
            try:
                return await client.score("held", {})
            finally:
                await client.close()

        out = asyncio.run(main())
    assert not out.ok and out.throttles == 3 and "ReservedFunctionConcurrentInvocationLimitExceeded" in out.error
    assert len(slept) >= 2 and all(d >= 1.0 for d in slept[-2:]), slept
