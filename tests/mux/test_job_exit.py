"""How a job's lifecycle ends: its clean-up runs to its end, and no job starts after `stop`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from roll_agentic.config import Config
from roll_agentic.mux import multiplexer as mux_mod
from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.mux_config import JobSpec, MuxConfig


class _Runner:
    """A job runner whose set-up never ends (cancelled there) and whose close is recorded."""

    made: list[_Runner] = []

    def __init__(self, *_a, **_k):
        self.closed, self.stop_requested, self.version = False, False, 0
        self.updating = False  # `Multiplexer.cancel` lets an update in flight end first
        _Runner.made.append(self)

    async def setup(self, *_a) -> None:
        await asyncio.sleep(3600)

    def request_stop(self) -> bool:
        return True

    async def save_newest_step(self, _ending: str) -> str:  # `mux cancel` keeps its finished steps
        return ""

    async def close(self) -> None:
        self.closed = True


def test_a_job_cancelled_again_in_its_clean_up_still_releases_and_closes(monkeypatch, tmp_path):
    """A second `mux cancel` (or `stop`) reaching a job in its clean-up skipped its group
    removal and its runner's close: a phantom member kept its nodes, its emulator ran on."""
    monkeypatch.setattr(mux_mod, "JobRunner", _Runner)
    _Runner.made = []

    async def main() -> None:
        mux = mux_mod.Multiplexer(MuxConfig(), str(tmp_path), "unused")
        releasing, go, released = asyncio.Event(), asyncio.Event(), []

        async def release(name: str) -> None:  # a trainer slot slow to drop the job's state
            releasing.set()
            await go.wait()
            released.append(name)

        mux.engines = {"rollout0": []}
        mux.slots = {"train0": SimpleNamespace(release=SimpleNamespace(remote=release))}
        rec = mux.records["a"] = JobRecord("a", 1.5, 10)
        task = mux.tasks["a"] = asyncio.create_task(mux._lifecycle(Config(), rec, ""))
        await asyncio.sleep(0)
        first = asyncio.create_task(mux.cancel("a"))
        await asyncio.wait_for(releasing.wait(), 30)  # in its clean-up now
        assert "a" in mux.closing
        assert await mux.cancel("a") is False  # ending already: not cancelled again
        await mux.stop(timeout_s=0.01)  # leaves it be too
        task.cancel()  # any other cancel is absorbed: the clean-up runs to its end
        await asyncio.sleep(0.01)
        go.set()
        assert await asyncio.wait_for(first, 30) is True
        await asyncio.wait_for(task, 30)
        assert released == ["a"] and _Runner.made[0].closed
        assert rec.state is JobState.CANCELLED and "a" not in mux.closing

    asyncio.run(main())


def test_a_job_submitted_while_the_multiplexer_stops_is_not_started(monkeypatch, tmp_path):
    """`stop` checked before the admission check's await only: a job past it started its
    lifecycle after `stop`, outside the jobs stop waits on."""
    import roll_agentic.train.job_setup

    monkeypatch.setattr(mux_mod, "JobRunner", _Runner)
    monkeypatch.setattr(roll_agentic.train.job_setup, "resolve_model_path", lambda cfg: "model")
    mux = mux_mod.Multiplexer(MuxConfig(), str(tmp_path), "unused")

    def stopped_meanwhile(*_a) -> str:  # `stop` arrives while the check runs off the loop
        mux._stopping = True
        return ""

    async def started() -> bool:
        return True

    monkeypatch.setattr(mux_mod.admission, "refusal", stopped_meanwhile)
    monkeypatch.setattr(mux, "start", started)

    async def main() -> None:
        with pytest.raises(ValueError, match="the multiplexer is stopping: job 'a' not taken"):
            await mux.submit(Config(), JobSpec("a", 1.5))
        assert "a" not in mux.tasks and "a" not in mux.records  # never left "profiling"

    asyncio.run(main())
