"""What a training job saves when it stops: on a Ctrl-C or SIGTERM, or on an error.

`StopCheckpoint` is a mixin of `TrainingJob` (roll_agentic/train/job.py). A step torn inside
its update saves nothing (the last checkpoint stands); any other stop saves the steps trained
since the last checkpoint. A step whose update is whole but whose sync or logging did not
happen is first finished as far as a checkpoint needs (`TrainedStep`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

import ray

from roll_agentic.train.checkpoint import is_latest, latest_checkpoint, save_checkpoint
from roll_agentic.train.termination import SigtermAsInterrupt


@dataclass
class TrainedStep:
    """What a step whose update has returned still lacks to be saved as trained.

    From `_update_done` on, the trainer's weights, optimizer state and step are the step's,
    whole, and the run's version counts it. An error or a stop after that point (the weight
    sync, the evaluation, the log) must still be able to write the final checkpoint as that
    step's, which needs the buffer advanced to match it (one still counting the step's groups
    as handed out re-rolled them on resume, one step behind) and the step's metrics row
    logged (or the log had a gap there). A field is None once done: a fresh `TrainedStep()`
    has nothing left to do.
    """

    advance: int | None = None  # the version the buffer is still to be advanced to
    row: dict[str, float] | None = None  # the step's metrics row, not yet logged


class StopCheckpoint:
    """Step finishing and checkpoints on stop of a `TrainingJob` (whose `__init__` sets the
    attributes used: guard, buffer, trainer, run_dir, version, _unfinished, ...)."""

    def _update_done(self, train_m: dict[str, float]) -> None:
        """The update is whole (every optimizer step taken, trainer.step counted): the step counts
        as trained from here, unpublished yet. An error from here on saves it (StepGuard's doc)."""
        self.version += 1
        self._unfinished = TrainedStep(advance=self.version, row=dict(train_m))
        self.guard.update_done()

    def _finish_trained_step(self, log=None) -> None:
        """What a step stopped after its whole update (an engine refused the weights, a worker died)
        lacks to be saved as trained. The buffer's advance: one still counting the step's groups as
        handed out re-rolled them on resume, one step behind (staleness, quota). Not the engines: a
        resume publishes the checkpoint's weights to its fresh ones (`_maybe_resume`). Raises if the
        buffer is gone: nothing is saved then, the last checkpoint stands."""
        step = self._unfinished
        if step.advance is not None:
            ray.get(self.buffer.advance.remote(step.advance))
            step.advance = None
        if log is not None and step.row is not None:  # its row, or the log had a gap there
            row, step.row = step.row, None
            log.write(self.version, row)

    def checkpoint(self, untrained: bool = False) -> Path:
        """Saves the run. `untrained`: the groups the buffer handed out since its last
        advance were not trained (the step stopped before its update): it keeps them."""
        state = ray.get(self.buffer.export_state.remote(untrained))
        # model_path: the model it trained from, resolved (`model export` writes its config and tokenizer)
        run_state = {"buffer": state, "run_name": self.run_name, "model_path": self.model_path}
        return save_checkpoint(self.run_dir / "checkpoints", self.version, self.trainer.engine_state_dict(),
                               self.trainer.state(), run_state, keep=self.cfg.trainer.keep_checkpoints)

    def _save_on_interrupt(self, term: SigtermAsInterrupt, log=None) -> None:
        """A Ctrl-C or SIGTERM stopped the run: a checkpoint, unless a step is torn."""
        torn, trained = self.guard.torn, self.guard.active  # active, not torn: its update is whole
        self.guard.abandon()
        cause = "terminated (SIGTERM)" if self._terminated(term) else "interrupted"
        if torn:
            print(f"\nstopped in the middle of step {self.version + 1}: nothing saved, the last "
                  "checkpoint stands", flush=True)
            return
        print(f"\n{cause}: saving a checkpoint before stopping ...", flush=True)
        # Not torn: no step is half done. One whose update had not begun took groups
        # (a streamed round's so far, or its batch) that trained nothing: saved as not
        # taken, or a resume never ran their prompts (a whole step's advance emptied the
        # list). Their streamed gradients are in no weight or optimizer state saved.
        # One whose update is whole (`trained`: a KeyboardInterrupt not the guard's
        # second) is first counted as trained, its buffer advanced.
        try:
            if trained:
                self._finish_trained_step(log)
            print(f"checkpoint: {self.checkpoint(untrained=True)}", flush=True)
        except Exception as err:  # a full disk, a dead buffer actor: said, with what a resume has
            last = latest_checkpoint(self.run_dir / "checkpoints")
            stands = (f"the last checkpoint, {last.name}, stands: a resume repeats the steps after it"
                      if last else "no checkpoint stands: a resume starts over")
            print(f"checkpoint failed ({type(err).__name__}: {err}): {stands}", flush=True)

    def _save_before_error(self, log=None) -> None:
        """A checkpoint of the steps trained since the last one, unless a step's update is half
        done. One whose update is whole (the error came in its sync, its evaluation) is saved
        as trained: the trainer's state is that step's, whole (StepGuard's doc)."""
        if self.guard.torn or self.version == 0:  # half done, or nothing trained yet
            return
        if is_latest(self.run_dir / "checkpoints", self.version):
            return  # nothing trained since
        try:
            if self.guard.active:  # not torn: the step's update is whole
                self._finish_trained_step(log)
            print(f"saving a checkpoint before stopping on the error: {self.checkpoint(untrained=True)}",
                  flush=True)
        except Exception as err:  # noqa: BLE001 - the run's own error is the one to raise
            print(f"checkpoint failed too ({type(err).__name__}: {err})", flush=True)

    def _terminated(self, term: SigtermAsInterrupt) -> bool:
        """Was it a SIGTERM that stopped the run (taken between steps, or held by a step)?"""
        return term.received or signal.SIGTERM in self.guard.received
