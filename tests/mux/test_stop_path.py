"""A job's newest steps kept as it ends early: a failure after its update, `mux cancel`, a stop
in its held evaluation; no checkpoint under a step its trainer is not at; a stopped step's due
evaluation run after the resume. Real trainer slots (in-process) under fake actor handles."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from roll_agentic.config import Config
from roll_agentic.mux import job_runner as job_runner_mod
from roll_agentic.mux import multiplexer as mux_mod
from roll_agentic.mux.job_runner import JobFailed, JobRunner
from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.mux_config import MuxConfig
from roll_agentic.mux.trainer_slot import StepMismatch, TrainerSlot
from roll_agentic.telemetry.metrics import MetricsLog
from roll_agentic.train.checkpoint import latest_checkpoint
from tests.mux.samples import one_node_board, random_samples

WAIT_S = 30.0  # every wait here is bounded


class _Handle:
    """A `TrainerSlot` called as through its Ray handle, in this process: `slot.method.remote(...)`
    is awaited, and a cancelled caller leaves the call running, as an actor does. `fail`:
    methods that raise this instead of running."""

    def __init__(self, slot: TrainerSlot, fail: dict[str, BaseException] | None = None):
        self.slot, self.fail = slot, dict(fail or {})

    def __getattr__(self, name: str) -> SimpleNamespace:
        method = getattr(self.slot, name)

        async def call(*args):
            await asyncio.sleep(0)  # served later, as an actor's call is
            if name in self.fail:
                raise self.fail[name]
            return method(*args)

        return SimpleNamespace(remote=lambda *args: asyncio.shield(asyncio.ensure_future(call(*args))))


class _Buffer:
    """The trajectory buffer's `export_state` (what a checkpoint's run state holds)."""

    def __init__(self):
        self.exported: list[bool] = []

        async def export_state(untrained: bool = False) -> dict:
            self.exported.append(untrained)
            return {"version": 0, "steps_taken": 0}

        self.export_state = SimpleNamespace(remote=export_state)


def _runner(tmp_path, monkeypatch, tiny_model_path, fail: dict | None = None) -> JobRunner:
    cfg = Config()
    cfg.algo.alpha = 0
    cfg.trainer.save_every, cfg.trainer.total_steps = 100, 10
    cfg.output_dir, cfg.run_name = str(tmp_path), "j"
    monkeypatch.setattr(job_runner_mod, "samples_from_groups", lambda *a, **k: random_samples(0))
    slot = TrainerSlot("t", budget_bytes=1 << 30)
    runner = JobRunner(cfg, JobRecord(f"j-{uuid.uuid4().hex[:8]}", 2.0, 10), one_node_board(), {},
                       {"t": _Handle(slot, fail)}, WAIT_S, max_rollbacks=0)
    slot.register(runner.name, tiny_model_path, cfg.trainer, cfg.algo, 1.0, str(runner.run_dir / "checkpoints"))
    runner.buffer, runner._groups, runner.model_path = _Buffer(), [], tiny_model_path
    runner.run_dir.mkdir(parents=True, exist_ok=True)  # made by `setup`, not run here
    runner._log = MetricsLog(runner.run_dir, tensorboard=False)
    return runner


def _saved_step(runner: JobRunner) -> int | None:
    ckpt = latest_checkpoint(runner.run_dir / "checkpoints")
    return None if ckpt is None else int(ckpt.name.removeprefix("step_"))


def _clean(runner: JobRunner) -> None:
    for p in runner.weights_dir.glob("*"):
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        runner.weights_dir.rmdir()


# -- 3: no checkpoint under another step's number ------------------------------------------------
def test_a_slot_refuses_a_checkpoint_under_a_step_its_trainer_is_not_at(tiny_model_path, tmp_path):
    """`mux cancel` cutting a train phase after its update had been queued on the slot saved step
    n+1's trainer state labelled step n: now refused, nothing written, active or from host."""
    from roll_agentic.config import AlgoConfig, TrainerConfig

    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    for job in ("a", "b"):
        slot.register(job, tiny_model_path, TrainerConfig(), AlgoConfig(alpha=0), 1.0, str(tmp_path / job))
    slot.switch_in("a")
    slot.train("a", random_samples(0))  # the trainer is at step 1
    with pytest.raises(StepMismatch, match="job a's trainer is at step 1, not 0: not checkpointed"):
        slot.checkpoint("a", 0, {}, keep=2)
    assert latest_checkpoint(tmp_path / "a") is None
    slot.reserve("a", slot.state_bytes("a")[0])
    slot.switch_in("b")  # a's state goes to host memory: checked there too
    with pytest.raises(StepMismatch, match="at step 1, not 2"):
        slot.checkpoint("a", 2, {}, keep=2)
    assert Path(slot.checkpoint("a", 1, {}, keep=2)).name == "step_000001"


def test_cancel_while_stopping_leaves_the_job_to_the_stop(tmp_path):
    """A `mux cancel` during `stop` cut a job finishing its step (`training`), whose stop then
    checkpointed the trainer's next step under the step before's number: it waits for the stop."""
    mux = mux_mod.Multiplexer(MuxConfig(phase_timeout_s=WAIT_S), str(tmp_path), "unused")

    async def main() -> None:
        finishing = asyncio.Event()

        async def lifecycle() -> str:
            await finishing.wait()  # the step in hand, then its stop checkpoint
            return "stopped"

        task = mux.tasks["a"] = asyncio.create_task(lifecycle())
        mux._stopping = True
        cancel = asyncio.create_task(mux.cancel("a"))
        await asyncio.sleep(0.05)
        assert not task.done() and not cancel.done()  # not cut: the cancel waits
        finishing.set()
        assert await asyncio.wait_for(cancel, WAIT_S) is False
        assert task.result() == "stopped" and "a" not in mux._cancelled

    asyncio.run(main())


# -- 1: a failure after the update keeps the step -------------------------------------------------
def test_a_job_failing_after_its_update_saves_that_step(tiny_model_path, tmp_path, monkeypatch):
    """Its weights file failing to write (any failure between steps, as well) closed the job with
    every step since its last due checkpoint lost; Ray's task error escaped unexplained too."""
    import ray.exceptions

    disk_full = ray.exceptions.RayTaskError("write_weights", "Traceback ...", OSError(28, "No space left on device"))
    runner = _runner(tmp_path, monkeypatch, tiny_model_path, fail={"write_weights": disk_full})

    async def main() -> str:
        with pytest.raises(JobFailed, match=r"train phase on t: its trainer failed: OSError: .*No space left"):
            await runner.train("t")
        assert runner.version == 1 and not runner.updating  # the update finished
        assert _saved_step(runner) is None  # save_every=100: not due
        return await runner.save_newest_step("failed")

    try:
        note = asyncio.run(main())
    finally:
        _clean(runner)
    assert note == "; its newest checkpoint: step 1" and _saved_step(runner) == 1
    assert runner.buffer.exported == [False]  # its batch was trained: none put back
    # Its row, never logged (the job ended before its sync), is there: a resume goes on after it.
    rows = runner._log.read()
    assert [r["step"] for r in rows] == [1] and "train/loss" in rows[0], rows


def test_a_save_that_fails_after_a_failure_is_noted_not_raised(tiny_model_path, tmp_path, monkeypatch, caplog):
    """The job's own error stays the one it fails with: the save's is logged and noted."""
    runner = _runner(tmp_path, monkeypatch, tiny_model_path,
                     fail={"write_weights": RuntimeError("engine sync"), "checkpoint": OSError("read-only")})

    async def main() -> str:
        with pytest.raises(RuntimeError, match="engine sync"):
            await runner.train("t")
        return await runner.save_newest_step("failed")

    try:
        note = asyncio.run(main())
    finally:
        _clean(runner)
    assert note == "; saving step 1 failed (OSError: read-only)" and _saved_step(runner) is None
    assert "saving step 1 failed: OSError: read-only" in caplog.text


def test_a_job_whose_update_fails_midway_saves_nothing(tiny_model_path, tmp_path, monkeypatch):
    """An update that raised may have left the trainer's tensors half updated: never saved."""
    runner = _runner(tmp_path, monkeypatch, tiny_model_path, fail={"train": RuntimeError("NaN in the update")})

    async def main() -> str:
        with pytest.raises(RuntimeError, match="NaN"):
            await runner.train("t")
        assert runner.updating and runner.version == 0
        return await runner.save_newest_step("failed")

    try:
        note = asyncio.run(main())
    finally:
        _clean(runner)
    assert note == "; step 1's update did not finish: nothing saved after step 0"
    assert _saved_step(runner) is None and runner.buffer.exported == []


class _Runner:
    """A job runner whose run fails, or waits to be cancelled; records what its lifecycle asks."""

    def __init__(self, *_a, fail: bool = False, at_end: bool = False, **_k):
        self.fail, self.at_end = fail, at_end
        self.stop_requested, self.version, self.asked = False, 0, []
        self.updating = False
        self.running = asyncio.Event()

    async def setup(self, *_a) -> None:
        if self.at_end:  # resumed from its last step's checkpoint
            self.version = 10

    async def evaluate_last(self) -> None:
        self.asked.append("evaluate_last")

    async def probe(self, *_a) -> dict:
        self.running.set()
        if self.fail:
            raise JobFailed("a rollout worker stopped between phases: ActorDiedError")
        await asyncio.sleep(3600)
        return {}

    async def save_newest_step(self, ending: str) -> str:
        self.asked.append(f"save ({ending})")
        return "; its newest checkpoint: step 3"

    def request_stop(self) -> bool:
        return True

    async def close(self) -> None:
        self.asked.append("close")


def _lifecycle(monkeypatch, tmp_path, **runner_kw) -> tuple[mux_mod.Multiplexer, JobRecord, _Runner]:
    made: list[_Runner] = []
    monkeypatch.setattr(mux_mod, "JobRunner", lambda *a, **k: made.append(_Runner(**runner_kw)) or made[-1])
    mux = mux_mod.Multiplexer(MuxConfig(phase_timeout_s=WAIT_S), str(tmp_path), "unused")
    async def release(_name: str) -> None:
        return None

    mux.engines, mux.slots = {"rollout0": []}, {"train0": SimpleNamespace(release=SimpleNamespace(remote=release))}
    cfg = Config()
    cfg.trainer.total_steps = 10
    rec = mux.records["a"] = JobRecord("a", 1.5, 10)
    mux.tasks["a"] = asyncio.get_running_loop().create_task(mux._lifecycle(cfg, rec, ""))
    return mux, rec, made


def test_a_failed_job_saves_its_newest_step_before_its_state_is_released(monkeypatch, tmp_path):
    async def main() -> None:
        mux, rec, made = _lifecycle(monkeypatch, tmp_path, fail=True)
        await asyncio.wait_for(mux.tasks["a"], WAIT_S)
        assert made[0].asked == ["save (failed)", "close"]  # saved before `_leave` dropped its state
        assert rec.state is JobState.FAILED
        assert rec.reason == ("JobFailed: a rollout worker stopped between phases: ActorDiedError; "
                              "its newest checkpoint: step 3")

    asyncio.run(main())


# -- 4: `mux cancel` keeps the finished steps ----------------------------------------------------
def test_a_cancelled_job_saves_its_newest_step(monkeypatch, tmp_path):
    async def main() -> None:
        mux, rec, made = _lifecycle(monkeypatch, tmp_path)
        await asyncio.sleep(0)
        await asyncio.wait_for(made[0].running.wait(), WAIT_S)
        rec.reason = "waiting: no group has room"  # a queued job's: not what the cancel says
        assert await asyncio.wait_for(mux.cancel("a"), WAIT_S) is True
        assert made[0].asked == ["save (cancelled)", "close"]
        assert rec.state is JobState.CANCELLED and rec.reason == "cancelled; its newest checkpoint: step 3"
        assert not mux._cancelled

    asyncio.run(main())


def test_a_cancel_waits_for_an_update_in_flight(tmp_path):
    """Cut inside its update, a job saved nothing, and every step since its last due checkpoint
    was lost: `mux cancel` lets the update end first (bounded by phase_timeout_s)."""
    mux = mux_mod.Multiplexer(MuxConfig(phase_timeout_s=WAIT_S), str(tmp_path), "unused")

    async def main() -> None:
        runner = SimpleNamespace(updating=True)
        mux.runners["a"] = runner  # type: ignore[assignment]
        task = mux.tasks["a"] = asyncio.create_task(asyncio.sleep(3600))
        cancel = asyncio.create_task(mux.cancel("a"))
        await asyncio.sleep(0.3)
        assert not task.done() and not cancel.done()  # the update is in flight: not cut
        runner.updating = False
        assert await asyncio.wait_for(cancel, WAIT_S) is True
        assert task.cancelled()

    asyncio.run(main())


def test_a_cancel_that_cuts_an_update_saves_nothing(tiny_model_path, tmp_path, monkeypatch):
    """Cut in its second update (the slot's `train` still runs it): step 2's state is not saved
    as step 1 (the slot refuses that too), nor as anything else."""
    runner = _runner(tmp_path, monkeypatch, tiny_model_path)

    async def main() -> str:
        await runner.train("t")
        phase = asyncio.create_task(runner.train("t"))
        while not runner.updating:
            await asyncio.sleep(0)
        phase.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(phase, WAIT_S)
        note = await runner.save_newest_step("cancelled")
        runner.updating = False  # were the guard gone: the slot, at step 2 by now, refuses step 1
        await asyncio.sleep(0.5)
        with pytest.raises(StepMismatch, match="at step 2, not 1"):
            await runner.checkpoint("t")
        return note

    try:
        note = asyncio.run(main())
    finally:
        _clean(runner)
    assert note == "; step 2's update did not finish: nothing saved after step 0" and _saved_step(runner) is None


# -- 2: a stop in the held evaluation puts the batch back -----------------------------------------
def test_a_stop_in_the_held_evaluation_puts_the_taken_batch_back(tmp_path, monkeypatch):
    """`untrained_batch` was set after the evaluation: a stop there saved the buffer as if the
    batch had been trained, and its prompts were skipped for good after the resume."""
    cfg = Config()
    cfg.output_dir, cfg.run_name = str(tmp_path), "j"
    runner = JobRunner(cfg, JobRecord("j", 2.0, 10), one_node_board(), {"r": []}, {}, WAIT_S)
    evaluating = asyncio.Event()

    async def nothing(*_a, **_k):
        return []

    async def evaluation() -> float:
        evaluating.set()
        await asyncio.sleep(3600)  # the stop comes here
        return 0.0

    async def batch(get_batch, *_a):
        return await get_batch

    monkeypatch.setattr(job_runner_mod, "drain", nothing)
    monkeypatch.setattr(job_runner_mod, "_engine_stats", nothing)
    monkeypatch.setattr(job_runner_mod, "await_batch", batch)
    monkeypatch.setattr(runner, "_load_weights", nothing)
    monkeypatch.setattr(runner, "_evaluate_held_row", evaluation)
    runner.version, runner.worker_engines, runner.worker_runs = 1, ["r"], [object()]
    runner._held_row = (1, {})
    runner.buffer = SimpleNamespace(advance=SimpleNamespace(remote=nothing), get_batch=SimpleNamespace(remote=nothing))

    async def main() -> None:
        phase = asyncio.create_task(runner.rollout(["r"]))
        await asyncio.wait_for(evaluating.wait(), WAIT_S)
        phase.cancel()  # `stop` cancels a job that is not training
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(phase, WAIT_S)

    asyncio.run(main())
    assert runner.untrained_batch  # `checkpoint_for_stop` exports the buffer with the batch put back


# -- 5: a stopped step's due evaluation runs after the resume -------------------------------------
@pytest.mark.parametrize("evaluated", [False, True])
def test_a_resumed_job_holds_the_due_evaluation_its_stop_cut(tmp_path, evaluated):
    from roll_agentic.telemetry.metrics import MetricsLog

    cfg = Config()
    cfg.eval.every, cfg.trainer.total_steps, cfg.output_dir, cfg.run_name = 2, 10, str(tmp_path), "j"
    runner = JobRunner(cfg, JobRecord("j", 2.0, 10), one_node_board(), {}, {}, WAIT_S)
    runner.run_dir.mkdir(parents=True)
    runner._log = MetricsLog(runner.run_dir, False)
    runner._log.write(1, {"reward/mean": 0.1})
    runner._log.write(2, {"reward/mean": 0.2, **({"time/eval_s": 1.0} if evaluated else {})})
    runner.version = 2  # resumed from its checkpoint of step 2

    asyncio.run(runner.hold_unevaluated_row())
    steps = [r["step"] for r in runner._log.read()]
    if evaluated:
        assert runner._held_row is None and steps == [1, 2]
    else:  # the next rollout phase evaluates step 2 and logs its row again, once
        assert runner._held_row == (2, {"reward/mean": 0.2}) and steps == [1]


def test_a_job_resumed_at_its_last_step_runs_its_cut_evaluation(monkeypatch, tmp_path):
    async def main() -> None:
        mux, rec, made = _lifecycle(monkeypatch, tmp_path, at_end=True)
        await asyncio.wait_for(mux.tasks["a"], WAIT_S)
        assert made[0].asked == ["evaluate_last", "close"] and rec.state is JobState.DONE

    asyncio.run(main())


# -- 6: the multiplexer's settings through a method of its own -----------------------------------
@pytest.mark.slow  # starts a local Ray (most of a minute on a small machine)
def test_mux_submit_reads_the_pool_settings_through_the_multiplexers_method(tmp_path):
    from roll_agentic.mux.cli import pool_settings

    m = MuxConfig(name="t", max_model_len=512)
    assert mux_mod.Multiplexer(m, str(tmp_path), "unused").settings() is m

    import ray

    from roll_agentic.cluster import init_ray
    from roll_agentic.config import RayConfig

    started = init_ray(RayConfig(num_cpus=1))
    try:
        mux = mux_mod.multiplexer_actor().remote(m, str(tmp_path), "unused")
        assert pool_settings(mux) == m
        ray.kill(mux)
    finally:
        if started:
            ray.shutdown()
    assert pool_settings(object()) is None  # a stand-in without it: nothing to check against
