"""A job marked to roll back (its newest state died with a trainer process) says so in
`mux status`, and to which checkpoint, from the mark until it has rolled back. Without Ray."""

from __future__ import annotations

import asyncio
import json
import shutil

from roll_agentic.config import Config
from roll_agentic.mux.job_state import JobRecord, JobState, format_status
from roll_agentic.mux.mux_config import MuxConfig


class _Slot:
    """A trainer slot (or its replacement) that answers every call: `slot.method.remote(...)`."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        from types import SimpleNamespace

        from roll_agentic.mux.trainer_slot import SwitchRecord

        answer = {"switch_in": SwitchRecord("lost", "cold", 0.0, 0.0), "write_weights": 0.0}.get(name, True)

        def remote(*args):
            self.calls.append((name, args))
            f = asyncio.get_running_loop().create_future()
            f.set_result(answer)
            return f

        return SimpleNamespace(remote=remote)


class _Buffer:
    """The job's trajectory buffer: a roll-back restarts it from the checkpoint's state."""

    class import_state:  # noqa: N801 - stands for the actor method
        @staticmethod
        def remote(_state):
            f = asyncio.get_running_loop().create_future()
            f.set_result(None)
            return f


def _checkpoint(run_dir, step: int) -> None:
    """A complete checkpoint of `step` (its run state only: the fake trainer loads nothing)."""
    d = run_dir / "checkpoints" / f"step_{step:06d}"
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"step": step, "buffer": {"version": step}, "run_name": "lost"}))
    (run_dir / "checkpoints" / "latest").write_text(d.name)


def test_a_job_marked_to_roll_back_says_so_in_status_until_it_has(monkeypatch, tmp_path):
    """Between the mark (`_trainer_lost`) and the roll-back (its next train phase, maybe a
    whole round later) `mux status` showed the job healthy at step 6, though steps 5 and 6
    were lost already: it now says it waits to roll back to its checkpoint of step 4."""
    from roll_agentic.mux import multiplexer as mux_mod
    from roll_agentic.mux.job_runner import JobRunner

    monkeypatch.setattr(mux_mod.ray, "kill", lambda *a, **k: None)  # the same `ray` the job runner kills with
    mux = mux_mod.Multiplexer(MuxConfig(name="t", max_rollbacks=2), str(tmp_path), "unused")
    mux.board.add_node("train0", "train")
    monkeypatch.setattr(mux, "_new_slot", lambda name: _Slot())
    mux.slots = {"train0": _Slot()}
    cfg = Config()
    cfg.output_dir, cfg.run_name, cfg.trainer.total_steps = str(tmp_path / "jobs"), "lost", 10
    rec = JobRecord("lost", 2.0, 10, state=JobState.RUNNING, nodes=["rollout0", "train0"], step=6,
                    profile={"state_bytes": 100.0})
    runner = JobRunner(cfg, rec, mux.board, {}, mux.slots, 5.0, on_trainer_lost=mux._trainer_lost, max_rollbacks=2)
    runner.slot_args, runner.version, runner.state_node, runner.buffer = ("model", "cfg"), 6, "train0", _Buffer()
    monkeypatch.setattr(runner, "_new_buffer", _Buffer)
    _checkpoint(runner.run_dir, 4)
    mux.records["lost"], mux.runners["lost"] = rec, runner

    async def main() -> tuple[dict, dict]:
        mux.tasks = {"lost": asyncio.ensure_future(asyncio.sleep(60))}
        try:
            # Another job's train phase found the trainer dead: this job's steps 5-6 died with it.
            await mux._trainer_lost("train0", "other", "train phase on train0: its trainer's process died")
            marked = mux.status()
            await runner.train("train0")  # its next train phase: the roll-back
            return marked, mux.status()
        finally:
            mux.tasks["lost"].cancel()

    try:
        marked, done = asyncio.run(main())
    finally:
        shutil.rmtree(runner.weights_dir, ignore_errors=True)
    why = "its trainer on train0 was restarted (other: train phase on train0: its trainer's process died)"
    assert marked["jobs"][0]["pending_rollback"] == {"to_step": 4, "why": why}
    assert f"waiting to roll back to its checkpoint of step 4 ({why})" in format_status(marked)
    job = done["jobs"][0]
    assert job["pending_rollback"] is None and job["step"] == 4 and job["rollbacks"] == [f"step 6 -> 4: {why}"]
    text = format_status(done)
    assert "roll back to" not in text and f"rolled back 1x (last: step 6 -> 4: {why})" in text


def test_status_says_a_roll_back_is_under_way_and_one_with_no_checkpoint_starts_afresh():
    """Its own phase shows the roll-back running; a job with no checkpoint goes back to step 0."""
    job = {"name": "j", "state": "running", "step": 3, "total_steps": 10, "phase": "rolling back", "group": 0,
           "slo": 2.0, "pending_rollback": {"to_step": 0, "why": "its trainer on train0 was restarted"}}
    snapshot = {"name": "m", "run_dir": "r", "uptime_s": 1.0, "jobs": [job]}
    assert "rolling back to step 0 (no checkpoint) (its trainer on train0 was restarted)" in format_status(snapshot)
