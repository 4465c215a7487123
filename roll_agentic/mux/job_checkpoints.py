"""A multiplexed job's checkpoints: the due ones, and its newest step saved as it ends early.

A job checkpoints in its train phase every `save_every` steps, at its last
step and when a stop is asked (`_save_if_due`), and at a stop (`job_stop.py`). A job that failed after an update (its weights
file, its engines, a dead worker, its held evaluation, a switch-in) or was
cancelled by `mux cancel` was closed with its trainer slot's state dropped:
up to save_every-1 trained steps were lost. Its lifecycle now saves its
newest whole step first (`save_newest_step`), best effort and bounded: a
failure to save is logged and said in the job's reason, never in place of
why the job ended. A step whose update itself failed (or was cut) may have
left the trainer's tensors half updated: nothing is saved then, and the
trainer slot refuses a checkpoint under a step its trainer is not at
(`TrainerSlot.checkpoint`).

A job stopped after a step whose evaluation was due had that evaluation
still to come (it runs in the next rollout phase, `job_evaluation.py`): its
row was logged without it and the resume never ran it. At a resume the row
is held again (`hold_unevaluated_row`). `JobRunner` mixes this in.
"""

from __future__ import annotations

import asyncio
import logging

from roll_agentic.mux.job_stop import StopAndResume
from roll_agentic.mux.rollback_mark import checkpoint_step
from roll_agentic.train.checkpoint import is_latest, latest_checkpoint
from roll_agentic.train.evaluation import evaluation_due

log = logging.getLogger(__name__)


class JobCheckpoints(StopAndResume):
    """Checkpoints of one job (mixed into `JobRunner`, which owns the state below)."""

    name: str
    slots: dict[str, object]
    phase_timeout_s: float
    model_path: str
    # From the trainer's update call to its answer: a failure or cancel there may leave the
    # trainer's tensors half updated (torn), which must never be saved as a step.
    updating: bool = False
    # In a train phase, whose silence or death a failure is: "trainer" or "buffer" (only the
    # trainer's is the node's, `JobRunner.train`).
    waiting_on: str = "trainer"
    # (step, its training metrics) from its update's answer until its row is logged or held.
    unlogged_step: tuple[int, dict[str, float]] | None = None
    _held_row: tuple[int, dict[str, float]] | None

    def checkpointed_at_version(self) -> bool:
        """Whether the job's latest checkpoint holds its current state (it can switch in cold)."""
        return is_latest(self.run_dir / "checkpoints", self.version)

    async def _run_state(self, untrained: bool = False) -> dict:
        # untrained: the batch taken since the last advance goes back into the stream (a stop mid-step).
        state = await self.buffer.export_state.remote(untrained)  # type: ignore[attr-defined]
        # A solo run advances its buffer at sync time; here advance waits for the job's
        # next rollout permit (so no ticket opens while other weights are loaded), so the
        # checkpoint records the state the advance will produce, and resumes like a solo one.
        state["version"] = state["steps_taken"] = self.version
        return {"buffer": state, "run_name": self.cfg.run_name, "model_path": self.model_path}

    async def checkpoint(self, node: str, run_state: dict | None = None) -> str:
        run_state = await self._run_state() if run_state is None else run_state
        return await self.slots[node].checkpoint.remote(  # type: ignore[attr-defined]
            self.name, self.version, run_state, self.cfg.trainer.keep_checkpoints)

    async def _save_if_due(self, slot, node: str, park: bool) -> None:
        """The step just trained, checkpointed when due (save_every, a stop asked, its last step);
        `park`: the probe's last step, checkpointed and dropped from the trainer (it is not
        resident until admitted)."""
        if park:
            self.record.profile["state_bytes"], self.record.profile["weights_bytes"] = \
                await slot.state_bytes.remote(self.name)
        elif not (self.version % self.cfg.trainer.save_every == 0 or self.stop_requested
                  or self.version == self.cfg.trainer.total_steps):
            return
        self.waiting_on = "buffer"
        run_state = await self._run_state()
        self.waiting_on = "trainer"
        if park:
            await slot.park.remote(self.name, self.version, run_state, self.cfg.trainer.keep_checkpoints)
            self.state_node = None  # in its checkpoint only
        else:
            await self.checkpoint(node, run_state)

    async def save_newest_step(self, ending: str) -> str:
        """Before a job that ends early (`ending`: failed, cancelled) lets go of its trainer
        state: its newest whole step checkpointed, unless saved already; the note for its
        reason. Best effort: whatever goes wrong here is logged and noted, never raised."""
        if self.updating:
            return f"; step {self.version + 1}'s update did not finish: nothing saved after step {self._checkpointed_step()}"
        await self._log_unlogged_step()
        try:
            step = await asyncio.wait_for(self.checkpoint_for_stop(), self.phase_timeout_s)
        except Exception as err:  # noqa: BLE001 - the job's own error is the one to report
            cause = err.cause if isinstance(getattr(err, "cause", None), Exception) else err  # Ray's, in one line
            why = (f"no answer within phase_timeout_s={self.phase_timeout_s}" if isinstance(cause, TimeoutError)
                   else f"{type(cause).__name__}: {cause}")
            if self.checkpointed_at_version():  # it landed all the same (a late answer; a park's)
                return f"; its newest checkpoint: step {self.version}"
            log.warning("job %s (%s): saving step %d failed: %s", self.name, ending, self.version, why)
            return f"; saving step {self.version} failed ({why})"
        return f"; its newest checkpoint: step {step}" if step else "; no checkpoint"

    async def _log_unlogged_step(self) -> None:
        """A step trained but not yet logged (the job ended in its weights write, its save or its
        sync) gets a row of its training metrics before it is saved: a resume from that save goes
        on after it, and its row would be missing for good. Best effort, as the save."""
        unlogged = self.unlogged_step
        if unlogged is None or unlogged[0] != self.version:
            return
        step, train_m = unlogged
        try:
            await asyncio.to_thread(self._log.write, step, {**train_m, "step": float(step)})  # type: ignore[attr-defined]
            self.unlogged_step = None
        except Exception as err:  # noqa: BLE001 - a lost row is not worth the save
            log.warning("job %s: step %d's row not logged: %s", self.name, step, err)

    def _checkpointed_step(self) -> int:
        return checkpoint_step(latest_checkpoint(self.run_dir / "checkpoints"))

    async def hold_unevaluated_row(self) -> None:
        """At a resume (after `resume_from_checkpoint`): if the step it goes on from had its
        evaluation due and its row holds none (stopped before it ran), that row is held again,
        so the next rollout phase (or `evaluate_last`) evaluates the step on its weights."""
        step = self.version
        if not step or not evaluation_due(self.cfg.eval, step, self.cfg.trainer.total_steps):
            return
        rows = [r for r in await asyncio.to_thread(self._log.read) if r["step"] == step]  # type: ignore[attr-defined]
        if rows and "time/eval_s" in rows[-1]:  # evaluated before the stop
            return
        row = {k: v for k, v in rows[-1].items() if k != "step"} if rows else {}
        # Held before it leaves the file: a cancel during the truncation still logs it at close.
        self._held_row = (step, row)  # logged once evaluated, one row per step as ever
        await asyncio.to_thread(self._log.truncate_after, step - 1)  # type: ignore[attr-defined]
