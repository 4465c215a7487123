"""The fault switches themselves, and what each hook does to its caller."""

import asyncio
import math
import os
import subprocess
import sys

import pytest

from roll_agentic import faults
from roll_agentic.reward.lambda_client import ServerlessRewardClient
from roll_agentic.reward.local import LocalRewardClient


@pytest.fixture(autouse=True)
def _off_after():
    yield
    faults.reset()


@pytest.mark.parametrize("spec", ["nope:0.1", "env_crash", "env_crash:2", "env_crash:x", "env_crash:0.1:-1",
                                  "env_crash:0.1:1:2:3"])
def test_a_bad_spec_is_one_clear_line(spec):
    with pytest.raises(ValueError) as err:
        faults.parse_spec(spec)
    assert faults.ENV_SPEC in str(err.value) and "\n" not in str(err.value)


def test_off_by_default_hooks_return_what_they_were_given():
    faults.reset()

    def step(a):
        return a

    assert faults.env_call(step) is step
    assert faults.reward_fn(step) is step
    assert faults.invoke_fn(step) is step
    faults.engine_request()  # a no-op, not an exit
    faults.checkpoint_stage("weights")


def test_cap_is_shared_across_processes_and_after_skips_opportunities(tmp_path):
    code = ("import sys; from roll_agentic import faults; inj = faults.reset('env_crash:1:3:2', 0, sys.argv[1]); "
            "print(sum(inj.hit('env_crash') for _ in range(10)))")
    hits = [int(subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                               check=True).stdout) for _ in range(3)]
    assert sum(hits) == 3 and hits[0] == 3  # the first process takes the whole budget of 3
    assert len(faults.read_injected(tmp_path)) == 3
    inj = faults.reset("env_crash:1:5:2", 0, "")
    assert [inj.hit("env_crash") for _ in range(4)] == [False, False, True, True]  # the first 2 pass


def test_env_crash_raises_in_the_call_and_hang_outlasts_it(monkeypatch):
    monkeypatch.setenv(faults.ENV_HANG_S, "0.01")

    def step(action):
        return action

    faults.reset("env_crash:1")
    with pytest.raises(faults.InjectedFault, match="injected env crash in step"):
        faults.env_call(step)("x")
    faults.reset("env_hang:1")
    assert faults.env_call(step)("x") == "x"  # a hang blocks for a while, then the call goes on


def test_local_reward_faults_become_failed_outcomes_never_a_number(monkeypatch):
    monkeypatch.setenv(faults.ENV_HANG_S, "1.0")
    summary = {"env_return": 1.0, "num_invalid": 0, "format_penalty": 0.1}

    async def score(spec):
        faults.reset(spec)
        client = LocalRewardClient(timeout_s=0.3)
        try:
            return await client.score("env_return", summary)
        finally:
            await client.close()

    for spec, why in [("reward_raise:1", "InjectedFault"), ("reward_timeout:1", "timed out"),
                      ("reward_nan:1", "not finite"), ("reward_nonjson:1", "not a number")]:
        out = asyncio.run(score(spec))
        assert not out.ok and out.value is None and why in out.error, (spec, out)
    assert asyncio.run(score("")).value == 1.0


class _NoCallClient:
    def close(self):
        pass


def test_serverless_faults_throttles_are_retried_and_others_fail_with_a_reason():
    async def score(spec):
        faults.reset(spec, seed=3)
        client = ServerlessRewardClient(None, client=_NoCallClient(), max_retries=3, backoff_base_s=0.001,
                                        max_throttle_retries=3, throttle_backoff_base_s=0.001)
        client._invoke = lambda name, payload: ({}, b'{"reward": 0.5}')  # the service itself, stubbed
        client._invoke_once = faults.invoke_fn(client._invoke)
        try:
            return await client.score("env_return", {"x": 1})
        finally:
            await client.close()

    out = asyncio.run(score("reward_throttle:0.5"))  # some attempts throttled, one gets through
    assert out.ok or "throttled" in out.error
    throttled = asyncio.run(score("reward_throttle:1"))
    assert not throttled.ok and throttled.throttles == 4 and "gave up after 4 attempts" in throttled.error
    for spec, why in [("reward_raise:1", "InjectedFault"), ("reward_nan:1", "not finite"),
                      ("reward_nonjson:1", "not JSON"), ("reward_timeout:1", "gave up")]:
        out = asyncio.run(score(spec))
        assert not out.ok and out.value is None and why in out.error, (spec, out)
    assert math.isclose(asyncio.run(score("")).value, 0.5)


def test_engine_die_ends_the_process(tmp_path):
    code = ("import sys; from roll_agentic import faults; faults.reset('engine_die:1:1', 0, sys.argv[1]); "
            "faults.engine_request(); print('survived')")
    first = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    again = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert first.returncode == 17 and "survived" not in first.stdout
    assert again.returncode == 0 and "survived" in again.stdout  # the budget of one is spent
    assert [f["kind"] for f in faults.read_injected(tmp_path)] == ["engine_die"]
    assert os.path.exists(tmp_path / "engine_die.0")
