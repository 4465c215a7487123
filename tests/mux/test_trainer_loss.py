"""A training node's trainer lost (wedged or dead), without Ray: its replacement, the jobs
that roll back to their checkpoints, and the calls and permits around it."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.config import Config
from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.mux_config import MuxConfig
from roll_agentic.mux.phase_board import PhaseBoard
from tests.mux.samples import one_node_board


class _Call:
    """`actor.method.remote(...)`: records the call, returns an awaitable."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def remote(self, *args):
        self.log.append((self.name, args))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut


class _FakeSlot:
    def __init__(self):
        self.calls: list = []

    def __getattr__(self, name: str) -> _Call:
        return _Call(self.calls, name)


def test_a_lost_trainer_is_replaced_and_jobs_whose_state_it_held_roll_back(monkeypatch, tmp_path):
    """`_trainer_lost`: the node gets a new trainer and every live job is registered on it
    (with its reservation where it is placed). The job that found it wedged and one trained
    there since its last checkpoint are set to roll back to their checkpoints; one rolled
    back `max_rollbacks` times already fails with the reason; the others are left alone."""
    from types import SimpleNamespace

    from roll_agentic.mux import multiplexer as mux_mod

    monkeypatch.setattr(mux_mod.ray, "kill", lambda *a, **k: None)
    mux = mux_mod.Multiplexer(MuxConfig(name="t", max_rollbacks=2), str(tmp_path), "unused")
    fresh = _FakeSlot()
    monkeypatch.setattr(mux, "_new_slot", lambda name: fresh)
    mux.slots = {"train0": _FakeSlot(), "train1": _FakeSlot()}

    def job(name: str, state_node: str | None, checkpointed: bool, nodes: list[str], rollbacks: int = 0):
        rec = JobRecord(name, 2.0, 10, state=JobState.RUNNING, nodes=nodes, profile={"state_bytes": 100.0})
        mux.records[name] = rec
        mux.runners[name] = SimpleNamespace(slot_args=("model", "cfg"), state_node=state_node,
                                            checkpointed_at_version=lambda: checkpointed,
                                            rollbacks=rollbacks, rollback_reason="")

    job("wedged", "train0", False, ["rollout0", "train0"])
    job("lost", "train0", False, ["rollout0", "train0"])
    job("lost_again", "train0", False, ["rollout0", "train0"], rollbacks=2)
    job("saved", "train0", True, ["rollout0", "train0"])
    job("elsewhere", "train1", False, ["rollout1", "train1"])

    async def main() -> dict[str, bool]:
        tasks = {n: asyncio.ensure_future(asyncio.sleep(60)) for n in mux.records}
        mux.tasks = tasks
        await mux._trainer_lost("train0", "wedged", "train phase exceeded phase_timeout_s=20.0 on train0")
        await asyncio.sleep(0)
        cancelled = {n: t.cancelled() for n, t in tasks.items()}
        for t in tasks.values():
            t.cancel()
        return cancelled

    cancelled = asyncio.run(main())
    assert mux.slots["train0"] is fresh and mux.trainer_restarts == {"train0": 1}
    assert cancelled == {"wedged": False, "lost": False, "lost_again": True, "saved": False, "elsewhere": False}
    rolling = {n: r.rollback_reason for n, r in mux.runners.items() if r.rollback_reason}
    assert sorted(rolling) == ["lost", "wedged"]
    assert rolling["lost"].startswith("its trainer on train0 was restarted (wedged: train phase exceeded")
    assert mux._failing == {"lost_again"}
    assert "rolled back 2x already (max_rollbacks=2)" in mux.records["lost_again"].reason
    registered = [args[0] for name, args in fresh.calls if name == "register"]
    reserved = [args[0] for name, args in fresh.calls if name == "reserve"]
    assert sorted(registered) == sorted(mux.records)  # every live job can train on any node
    assert sorted(reserved) == ["lost", "lost_again", "saved", "wedged"]  # the jobs placed there


def test_a_new_trainer_that_never_starts_is_named_not_a_bare_timeout(monkeypatch, tmp_path):
    """The replacement's ping past NEW_TRAINER_WAIT_S failed the job with "TimeoutError: "."""
    from roll_agentic.mux import multiplexer as mux_mod

    class Silent(_FakeSlot):
        def __getattr__(self, name: str) -> _Call:
            call = _Call(self.calls, name)
            if name == "ping":
                call.remote = lambda *a: asyncio.get_running_loop().create_future()  # never answers
            return call

    monkeypatch.setattr(mux_mod.ray, "kill", lambda *a, **k: None)
    monkeypatch.setattr(mux_mod, "NEW_TRAINER_WAIT_S", 0.05)
    mux = mux_mod.Multiplexer(MuxConfig(name="t"), str(tmp_path), "unused")
    monkeypatch.setattr(mux, "_new_slot", lambda name: Silent())
    mux.slots = {"train0": _FakeSlot()}
    with pytest.raises(RuntimeError, match="the new trainer process on train0 did not start within 0s "
                                           r"\(after: train phase exceeded"):
        asyncio.run(mux._trainer_lost("train0", "j", "train phase exceeded phase_timeout_s=20.0 on train0"))


def test_max_rollbacks_is_checked_at_the_edge(tmp_path):
    """0 keeps the earlier behaviour (a job whose state was lost fails); below 0 is refused."""
    from roll_agentic.config import ConfigError
    from roll_agentic.mux.mux_config import load_mux_config

    path = tmp_path / "m.yaml"
    path.write_text("max_rollbacks: -1\n")
    with pytest.raises(ConfigError, match="max_rollbacks: expected an integer >= 0"):
        load_mux_config(path)
    path.write_text("max_rollbacks: 0\n")
    assert load_mux_config(path).max_rollbacks == 0


def test_a_call_queued_on_a_replaced_trainer_goes_to_the_new_one():
    """A reservation or registration queued behind a wedged trainer fails when that one is
    killed; once the node has a new trainer, it is made there instead of failing its job."""
    import ray.exceptions

    from roll_agentic.mux.actor_calls import on_current_slot

    async def main() -> list:
        old, new = _FakeSlot(), _FakeSlot()
        slots = {"train0": old}

        def reserve(slot):
            if slot is old:
                slots["train0"] = new  # replaced while the call waited
                raise ray.exceptions.ActorDiedError()
            return slot.reserve.remote("job", 100)

        assert await on_current_slot(slots, "train0", reserve)
        with pytest.raises(ray.exceptions.ActorDiedError):  # not replaced: the error stands
            await on_current_slot({"train0": old}, "train0", reserve)
        return new.calls

    assert asyncio.run(main()) == [("reserve", ("job", 100))]


def test_a_dead_buffer_in_a_train_phase_is_not_taken_for_a_dead_trainer(tmp_path, monkeypatch):
    """Its checkpoint's run state comes from the job's buffer: that actor dying failed the job
    as 'its trainer process died' and replaced a healthy trainer."""
    from types import SimpleNamespace

    import ray.exceptions

    from roll_agentic.mux import job_runner
    from roll_agentic.mux.job_runner import JobFailed, JobRunner

    class Slot(_FakeSlot):
        def __getattr__(self, name: str) -> _Call:
            call = _Call(self.calls, name)
            if name == "switch_in":
                call.remote = lambda *a: _done(SimpleNamespace(kind="none"))
            return call

    class DeadBuffer:
        class export_state:  # noqa: N801 - stands for the actor method
            @staticmethod
            def remote(untrained=False):
                f = asyncio.get_running_loop().create_future()
                f.set_exception(ray.exceptions.ActorDiedError())
                return f

    def _done(value):
        f = asyncio.get_running_loop().create_future()
        f.set_result(value)
        return f

    lost: list = []

    async def on_lost(*args):
        lost.append(args)

    async def main() -> str:
        cfg = Config()
        cfg.trainer.save_every, cfg.output_dir, cfg.run_name = 1, str(tmp_path), "j"
        runner = JobRunner(cfg, JobRecord("j", 2.0, 10), one_node_board(), {}, {"t": Slot()}, 5.0, on_trainer_lost=on_lost)
        runner.buffer, runner._groups = DeadBuffer(), []
        monkeypatch.setattr(job_runner, "samples_from_groups", lambda groups, eps, estimator="grpo": [])
        with pytest.raises(JobFailed) as err:
            await runner.train("t")
        return str(err.value)

    message = asyncio.run(main())
    assert "its trajectory buffer's process died" in message and lost == []


class _TrainSlot(_FakeSlot):
    """A trainer slot that answers a train phase's calls (switch-in, step, weights write)."""

    def __init__(self, dead: bool = False):
        super().__init__()
        self.dead = dead

    def __getattr__(self, name: str) -> _Call:
        from roll_agentic.mux.trainer_slot import SwitchRecord

        call = _Call(self.calls, name)
        answers = {"switch_in": SwitchRecord("j", "cold", 0.0, 0.0), "train": {"train/loss": 0.0},
                   "write_weights": 0.0}

        def remote(*args):
            self.calls.append((name, args))
            f = asyncio.get_running_loop().create_future()
            if self.dead:
                import ray.exceptions

                f.set_exception(ray.exceptions.ActorDiedError())
            else:
                f.set_result(answers.get(name, True))
            return f

        call.remote = remote
        return call


def _train_runner(tmp_path, monkeypatch, slots: dict, board: PhaseBoard, on_lost=None, name: str = "j"):
    from roll_agentic.mux import job_runner
    from roll_agentic.mux.job_runner import JobRunner

    cfg = Config()
    cfg.trainer.save_every, cfg.trainer.total_steps, cfg.output_dir, cfg.run_name = 100, 10, str(tmp_path), name
    monkeypatch.setattr(job_runner, "samples_from_groups", lambda groups, eps, estimator="grpo": [])
    runner = JobRunner(cfg, JobRecord(name, 2.0, 10), board, {}, slots, 5.0, on_trainer_lost=on_lost,
                       max_rollbacks=2)
    runner._groups = []
    return runner


def test_a_train_phase_queued_while_its_trainer_is_replaced_uses_the_new_one(tmp_path, monkeypatch):
    """A job waiting for the train permit while the job ahead found the trainer wedged (the
    usual case: round robin queues it there) called the killed trainer it had looked up
    before its turn, took it for dead too and replaced the healthy new one, rolling back."""
    old, new = _TrainSlot(dead=True), _TrainSlot()
    slots = {"t": old}
    lost: list = []

    async def on_lost(*args):
        lost.append(args)

    async def main() -> None:
        board = one_node_board()
        runner = _train_runner(tmp_path, monkeypatch, slots, board, on_lost)
        async with board.hold("other", "train", ["t"]):
            phase = asyncio.ensure_future(runner.train("t"))
            await asyncio.sleep(0.01)  # queued behind "other"
            slots["t"] = new  # "other" found the trainer wedged: the node has a new one
        await phase

    asyncio.run(main())
    assert lost == [] and [c for c, _ in new.calls] == ["switch_in", "train", "write_weights"]
    assert old.calls == []


def test_a_trainer_that_dies_in_a_roll_back_is_replaced_too(tmp_path, monkeypatch):
    """The new trainer dying (or wedging) while a job rolls back on it failed that job and
    left the node with the dead trainer: the jobs whose state it held since were not rolled
    back, and a wedged one held the next job for a whole phase_timeout_s again."""
    from roll_agentic.mux.job_runner import JobFailed

    slots = {"t": _TrainSlot(dead=True)}
    lost: list = []

    async def on_lost(*args):
        lost.append(args)

    async def main() -> str:
        runner = _train_runner(tmp_path, monkeypatch, slots, one_node_board(), on_lost)
        runner.version, runner.rollback_reason = 3, "its trainer on t was restarted (x: wedged)"
        assert runner.record.pending_rollback is not None  # `mux status` shows the roll-back to come
        with pytest.raises(JobFailed) as err:
            await runner.train("t")
        assert runner.record.pending_rollback is None  # it failed instead: none to come
        return str(err.value)

    message = asyncio.run(main())
    assert "rolling back to its last checkpoint failed (ActorDiedError)" in message
    assert [(n, j) for n, j, _ in lost] == [("t", "j")] and "rolling back" in lost[0][2]


def test_a_job_cancelled_while_its_trainer_is_replaced_holds_the_node_until_it_is(tmp_path, monkeypatch):
    """The restart is shielded from the finder's cancel, but the finder's permit was not: the
    next job's train phase reached the new trainer before it had registered that job (which
    failed it) or marked the jobs whose state died for a roll-back."""
    slots = {"t": _TrainSlot(dead=True)}
    events: list = []

    async def on_lost(node, job, why):
        await asyncio.sleep(0.1)  # the new trainer starting; jobs registered on it
        events.append("restarted")

    async def main() -> None:
        board = one_node_board()
        runner = _train_runner(tmp_path, monkeypatch, slots, board, on_lost)
        phase = asyncio.ensure_future(runner.train("t"))
        await asyncio.sleep(0.02)  # in the restart
        phase.cancel()
        async with board.hold("next", "train", ["t"]):
            events.append("next train")
        with pytest.raises(asyncio.CancelledError):
            await phase

    asyncio.run(main())
    assert events == ["restarted", "next train"]


def test_a_job_that_ends_while_its_trainer_is_replaced_holds_no_reservation_there(monkeypatch, tmp_path):
    """A job on another node that ended while `_trainer_lost` registered it on the new trainer
    had its release (its `_leave`) served between the registration and the reservation: its
    host memory stayed reserved on the node for the multiplexer's life, failing later jobs."""
    from types import SimpleNamespace

    from roll_agentic.mux import multiplexer as mux_mod

    monkeypatch.setattr(mux_mod.ray, "kill", lambda *a, **k: None)
    mux = mux_mod.Multiplexer(MuxConfig(name="t"), str(tmp_path), "unused")
    rec = JobRecord("ending", 2.0, 10, state=JobState.RUNNING, nodes=["rollout0", "train0"],
                    profile={"state_bytes": 100.0})
    mux.records["ending"] = rec
    mux.runners["ending"] = SimpleNamespace(slot_args=("model", "cfg"), state_node=None, rollbacks=0,
                                            checkpointed_at_version=lambda: True, rollback_reason="")

    class Slot(_FakeSlot):
        held: set = set()

        def __getattr__(self, name: str) -> _Call:
            call = _Call(self.calls, name)
            inner = call.remote

            def remote(*args):
                if name == "reserve":
                    self.held.add(args[0])
                elif name == "release":
                    self.held.discard(args[0])
                elif name == "register":  # the job ends meanwhile; its release is served next
                    rec.state = JobState.DONE
                    self.held.discard(args[0])
                return inner(*args)

            call.remote = remote
            return call

    fresh = Slot()
    monkeypatch.setattr(mux, "_new_slot", lambda name: fresh)
    mux.slots = {"train0": _FakeSlot()}
    asyncio.run(mux._trainer_lost("train0", "other", "train phase on train0: its trainer's process died"))
    assert fresh.held == set()


def test_a_step_whose_checkpoint_was_saved_before_its_trainer_died_is_kept(tmp_path, monkeypatch):
    """The trainer killed after the step's checkpoint was complete (ckpt_kill before_prune):
    the job "rolled back" to that same step, dropping the step's metrics and its step end
    (its metrics.jsonl then lacked the step and step_ends ran one short for good). Nothing
    of it was lost: the step ends as one, and the next switches in cold from the checkpoint."""
    import json

    class Slot(_TrainSlot):
        def __getattr__(self, name: str) -> _Call:
            call = super().__getattr__(name)
            if name == "checkpoint":
                def remote(job, version, run_state, keep):
                    import ray.exceptions

                    root = tmp_path / "j" / "checkpoints"
                    (root / f"step_{version:06d}").mkdir(parents=True)
                    (root / f"step_{version:06d}" / "run.json").write_text(json.dumps({"step": version, **run_state}))
                    (root / "latest").write_text(f"step_{version:06d}")
                    f = asyncio.get_running_loop().create_future()
                    f.set_exception(ray.exceptions.ActorDiedError())  # killed before its answer
                    return f
                call.remote = remote
            return call

    class Buffer:
        class export_state:  # noqa: N801 - stands for the actor method
            @staticmethod
            def remote(*_state):
                f = asyncio.get_running_loop().create_future()
                f.set_result({"version": 0, "steps_taken": 0})
                return f

        import_state = export_state

    slots = {"t": Slot()}

    async def main():
        runner = _train_runner(tmp_path, monkeypatch, slots, one_node_board())

        async def on_lost(node, job, why):  # what the multiplexer does for the job that found it
            slots[node] = _TrainSlot()
            runner.rollback_reason = f"its trainer on {node} was restarted ({job}: {why})"

        runner.on_trainer_lost, runner.buffer = on_lost, Buffer()
        runner.cfg.trainer.save_every = 1
        monkeypatch.setattr(runner, "_new_buffer", Buffer)
        await runner.train("t")
        return runner

    runner = asyncio.run(main())
    assert runner.version == runner.record.step == 1 and len(runner.record.step_ends) == 1
    assert runner.record.rollbacks == [] and not runner._rolled_back and runner.rollback_reason == ""
    assert runner.record.pending_rollback is None  # the mark, dropped, is not shown in `mux status`
