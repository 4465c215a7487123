"""A multiplexed job stopped with its newest state saved, and resumed from it.

`mux run` stopped by Ctrl-C or a job scheduler's SIGTERM (Slurm preemption,
a Kubernetes eviction) used to cancel every job where it was: the steps
since each job's last `save_every` checkpoint were lost, and the jobs could
not be continued at all (a name submitted again started over in a new
directory). Now the multiplexer stops every job at its next safe point
(`Multiplexer.stop`):
- a job between its train permit and its logged step (`training`) finishes
  that step, checkpointing it, and goes no further;
- any other job (rolling out, waiting, queued) is cancelled at once: its
  newest state is that of its last whole step, still in its training node's
  host memory, and is checkpointed there (`checkpoint_for_stop`), with the
  prompts of the batch it had not trained yet put back in its stream.
`mux run CONF --resume RUN` then submits the jobs with `trainer.resume`:
each continues from its checkpoint (`resume_from_checkpoint`) in its own
run directory, as a resumed `roll-agentic train` would. `JobRunner` mixes
this in.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from roll_agentic.config import Config
from roll_agentic.mux.job_state import JobRecord
from roll_agentic.mux.rollback_mark import checkpoint_step
from roll_agentic.train.checkpoint import latest_checkpoint, load_run_state


class StopAndResume:
    """Stop-time checkpoints and resumes of one job (mixed into `JobRunner`, which owns the state below)."""

    cfg: Config
    record: JobRecord
    run_dir: Path
    version: int
    state_node: str | None
    buffer: object
    _log: object
    _probing: bool
    # Set by `Multiplexer.stop`: go no further than the step in hand.
    stop_requested: bool = False
    # From its train phase's start (permit wait included) to its step logged: a cancel
    # there would leave its trainer a step ahead of `version`, so it is never cancelled.
    training: bool = False
    # The batch in hand was taken from the buffer and not trained yet (its prompts go back).
    untrained_batch: bool = False

    def _weights_path(self, version: int) -> str:
        raise NotImplementedError

    def checkpointed_at_version(self) -> bool:
        raise NotImplementedError

    async def checkpoint(self, node: str, run_state: dict | None = None) -> str:
        raise NotImplementedError

    async def _run_state(self, untrained: bool = False) -> dict:
        raise NotImplementedError

    def request_stop(self) -> bool:
        """Asks the job to stop; True if it may be cancelled now (not mid-step, not probing:
        a probe holds its nodes and checkpoints itself after the step in hand)."""
        self.stop_requested = True
        return not (self.training or self._probing)

    async def checkpoint_for_stop(self) -> int:
        """Saves the job's newest whole step unless its latest checkpoint holds it already;
        returns the step its latest checkpoint holds (0: none, it would start over).

        Its state is where its last train phase left it: on that node's trainer, active or
        in host memory (an admitted job is resident), so the save needs no train permit.
        A job marked to roll back lost that state: its last checkpoint stands.
        """
        # Not inside an update (`JobCheckpoints.updating`): the trainer's state may be torn there.
        if self.version and self.state_node is not None and not self.checkpointed_at_version() \
                and not getattr(self, "rollback_reason", "") and not getattr(self, "updating", False):
            await self.checkpoint(self.state_node, await self._run_state(untrained=self.untrained_batch))
        return checkpoint_step(latest_checkpoint(self.run_dir / "checkpoints"))

    async def resume_from_checkpoint(self) -> None:
        """At set-up, for a job submitted with `trainer.resume`: its buffer, step and metrics
        go back to its latest checkpoint, and the engines' first load is that checkpoint's
        weights. The trainer needs nothing here: a slot switches a job in from its latest
        checkpoint when it holds no newer state (`TrainerSlot.switch_in`)."""
        ckpt = latest_checkpoint(self.run_dir / "checkpoints")
        if not self.cfg.trainer.resume or ckpt is None:
            return
        step = checkpoint_step(ckpt)
        await self.buffer.import_state.remote(load_run_state(ckpt)["buffer"])
        # A copy: the engines' file is deleted once loaded, and the checkpoint must stay whole.
        await asyncio.to_thread(shutil.copyfile, ckpt / "weights.safetensors", self._weights_path(step))
        await asyncio.to_thread(self._log.truncate_after, step)
        self.version = self.record.step = self.record.resumed_from = step
