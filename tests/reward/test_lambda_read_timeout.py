"""How long the serverless reward client waits for an Invoke: the function's Timeout, cold start included.

Before, reads gave up at the function's Timeout + 5 s. On a cold start AWS
runs the function's Init phase (up to 10 s) before the Timeout starts
counting, so a cold invocation of a function with a short Timeout was cut off
client-side while AWS would still answer, and the retry ran it a second time.
No network here: boto3 clients are built, never called (the endpoint is a
closed port on 127.0.0.1).
"""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.reward.lambda_client import (
    LAMBDA_INIT_ALLOWANCE_S,
    READ_TIMEOUT_SLACK_S,
    ServerlessRewardClient,
    read_timeout_s,
)

ENDPOINT = "http://127.0.0.1:9"


def test_the_read_timeout_allows_for_a_cold_starts_init_phase():
    assert LAMBDA_INIT_ALLOWANCE_S == 10.0  # AWS Lambda's Init phase limit
    assert READ_TIMEOUT_SLACK_S == 5.0
    assert read_timeout_s(3) == 3 + 10 + 5
    assert read_timeout_s(120.0) == 135.0
    # A function whose Timeout is 1 s may take 10 s of Init and 1 s of handler: the wait covers both.
    assert read_timeout_s(1) > LAMBDA_INIT_ALLOWANCE_S + 1


@pytest.fixture
def reward_client():
    made = []

    def make(**kwargs) -> ServerlessRewardClient:
        made.append(ServerlessRewardClient(ENDPOINT, **kwargs))
        return made[-1]

    yield make
    for c in made:
        asyncio.run(c.close())


def test_the_boto3_client_waits_that_long_and_still_leaves_retrying_to_us(reward_client):
    rc = reward_client(timeout_s=3.0)
    config = rc._client.meta.config
    assert config.read_timeout == 3 + LAMBDA_INIT_ALLOWANCE_S + READ_TIMEOUT_SLACK_S
    assert config.retries["total_max_attempts"] == 1  # retry semantics unchanged: this client retries itself


class _Configs:
    """Answers GetFunctionConfiguration with a Timeout, as the service does."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def get_function_configuration(self, FunctionName: str) -> dict:  # noqa: N803 - boto3's name
        return {"FunctionName": FunctionName, "Timeout": self.timeout_s}

    def close(self) -> None:
        pass


def test_a_function_with_its_own_timeout_gets_a_client_that_waits_for_it_cold(reward_client):
    rc = reward_client(timeout_s=0.5)
    rc._client = _Configs(timeout_s=2)  # a short Timeout: the init allowance is most of the wait
    client = rc._client_for("roll-agentic-short")
    assert client.meta.config.read_timeout == 2 + LAMBDA_INIT_ALLOWANCE_S + READ_TIMEOUT_SLACK_S
    assert rc._client_for("roll-agentic-short") is client  # asked once, one client per wait
