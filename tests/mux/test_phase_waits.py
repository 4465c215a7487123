"""The waits a multiplexed job's phase ends on (mux/phase_waits.py)."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.mux.phase_waits import JobFailed, await_batch, drain
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


class _Call:
    def __init__(self, fn):
        self.remote = fn


def _engine(load=None, load_weights=None):
    async def zero(*_a):
        return 0

    async def stats():
        return {}

    return type("Engine", (), {"load": _Call(load or zero), "stats": _Call(stats),
                               "load_weights": _Call(load_weights or zero)})()


def test_an_engine_whose_load_check_fails_is_not_drained():
    """Errors were left out of the check: engines that all failed counted as drained."""
    async def dead():
        raise RuntimeError("engine actor died")

    with pytest.raises(JobFailed, match="1 of 2 engines failed their load check: RuntimeError: engine actor died"):
        asyncio.run(drain([_engine(), _engine(load=dead)]))
    with pytest.raises(JobFailed, match="2 of 2 engines failed"):
        asyncio.run(drain([_engine(load=dead), _engine(load=dead)]))


def test_a_load_check_that_never_answers_fails_the_drain():
    def never():
        return asyncio.get_running_loop().create_future()

    with pytest.raises(JobFailed, match="did not say their load within 0.05s"):
        asyncio.run(asyncio.wait_for(drain([_engine(load=never)], timeout_s=0.05), 30))


def test_a_wedged_engine_call_in_a_rollout_phase_fails_the_job_and_lets_go_of_the_node(monkeypatch, tmp_path):
    """The batch wait had a limit, the rest of the held phase none: one weight load that never
    answered held the rollout node, and every job queued on it, forever."""
    from roll_agentic.config import Config
    from roll_agentic.mux import phase_waits
    from roll_agentic.mux.job_runner import JobRunner
    from roll_agentic.mux.job_state import JobRecord
    from roll_agentic.mux.phase_board import PhaseBoard

    monkeypatch.setattr(phase_waits, "ROLLOUT_LOAD_MARGIN_S", 0.0)

    def wedged(*_a):
        return asyncio.get_running_loop().create_future()

    cfg = Config()
    cfg.output_dir, cfg.run_name = str(tmp_path / "jobs"), "j"
    (tmp_path / "model.safetensors").write_bytes(b"")  # the first load's file (never read here)

    async def main() -> dict:
        board = PhaseBoard()
        board.add_node("r", "rollout")
        runner = JobRunner(cfg, JobRecord("j", 2.0, 10), board, {"r": [_engine(load_weights=wedged)]}, {}, 0.05)
        runner.model_path = str(tmp_path)
        try:
            with pytest.raises(JobFailed, match=r"rollout phase exceeded 1x phase_timeout_s=0.05 \(\+0s for weight "
                                                r"loads\) on r: an engine, the buffer or a worker did not answer"):
                await asyncio.wait_for(runner.rollout(["r"]), 30)
            return board.snapshot()["r"]
        finally:
            await runner.close()

    assert asyncio.run(main())["holder"] is None


def test_a_wedged_weight_load_in_the_last_evaluation_fails_the_job_and_lets_go_of_the_node(monkeypatch, tmp_path):
    """The last step's evaluation takes a held phase of its own: its weight load had no limit,
    so an engine that never answered held the rollout node for ever."""
    from roll_agentic.config import Config
    from roll_agentic.mux import phase_waits
    from roll_agentic.mux.job_runner import JobRunner
    from roll_agentic.mux.job_state import JobRecord
    from roll_agentic.mux.phase_board import PhaseBoard

    monkeypatch.setattr(phase_waits, "ROLLOUT_LOAD_MARGIN_S", 0.0)

    def wedged(*_a):
        return asyncio.get_running_loop().create_future()

    cfg = Config()
    cfg.output_dir, cfg.run_name = str(tmp_path / "jobs"), "j"

    async def main() -> dict:
        board = PhaseBoard()
        board.add_node("r", "rollout")
        runner = JobRunner(cfg, JobRecord("j", 2.0, 10), board, {"r": [_engine(load_weights=wedged)]}, {}, 0.05)
        runner.model_path = str(tmp_path)
        runner.version, runner.worker_engines = 3, ["r"]
        runner._held_row = (3, {"loss": 0.0})  # step 3's evaluation is due
        try:
            with pytest.raises(JobFailed, match=r"eval phase exceeded 1x phase_timeout_s=0.05 .* on r"):
                await asyncio.wait_for(runner.evaluate_last(), 30)
            return board.snapshot()["r"]
        finally:
            await runner.close()

    assert asyncio.run(main())["holder"] is None
