"""The waits a multiplexed job's phase ends on (mux/phase_waits.py)."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.mux.phase_waits import JobFailed, await_batch
from roll_agentic.rollout.buffer import RolloutFailing


def test_a_buffer_that_gives_up_fails_the_job_with_its_own_message():
    async def get_batch():
        raise RolloutFailing("every episode of the last 16 groups failed in reward 'my_reward': KeyError")

    async def worker_run():
        await asyncio.sleep(10)

    with pytest.raises(JobFailed, match="reward 'my_reward': KeyError") as info:
        asyncio.run(await_batch(get_batch(), [worker_run()], timeout_s=5.0))
    assert info.value.__cause__ is None  # the buffer's message alone, no chained traceback


def test_a_worker_that_stops_first_fails_the_job():
    async def get_batch():
        await asyncio.sleep(10)

    async def worker_run():
        raise RuntimeError("worker died")

    with pytest.raises(JobFailed, match="rollout worker stopped mid-phase: RuntimeError"):
        asyncio.run(await_batch(get_batch(), [worker_run()], timeout_s=5.0))


def test_the_batch_comes_back_when_it_is_ready():
    async def get_batch():
        return [["g"]]

    assert asyncio.run(await_batch(get_batch(), [], timeout_s=5.0)) == [["g"]]
