"""A multiplexed job whose trainer process died: back to its last checkpoint, then on.

Several jobs keep their newest state in one training node's trainer process
(`trainer_slot.py`). When that process is found wedged or dead, the
multiplexer starts a new one (`JobRunner.on_trainer_lost`) and marks every
job whose newest state died with it (`rollback_reason`); each such job's
next train phase rolls back to its last checkpoint (`_roll_back`) instead
of failing with its completed steps lost. `JobRunner` mixes this in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path

import ray

from roll_agentic.mux import rollback_mark
from roll_agentic.mux.actor_calls import pin_actors
from roll_agentic.mux.job_state import JobRecord
from roll_agentic.mux.phase_waits import JobFailed
from roll_agentic.train.checkpoint import latest_checkpoint, load_run_state


class TrainerLossRecovery:
    """Roll-backs of one job (mixed into `JobRunner`, which owns the state named below)."""

    name: str
    record: JobRecord
    run_dir: Path
    version: int
    slots: dict[str, object]
    state_node: str | None
    phase_timeout_s: float
    on_trainer_lost: Callable[[str, str, str], Awaitable[None]] | None
    weights_dir: Path
    buffer: object
    rollout_cpus: tuple[int, ...]
    _rollback_reason: str
    _held_row: tuple[int, dict[str, float]] | None
    _groups: list
    _rolled_back: bool
    _log: object

    def _weights_path(self, version: int) -> str:
        raise NotImplementedError

    async def _restart_buffer(self, state: dict | None) -> None:
        raise NotImplementedError

    async def _trainer_lost(self, node: str, why: str) -> None:
        """The node gets a new trainer (`on_trainer_lost`), this job holding it meanwhile.

        Shielded: this job cancelled meanwhile must not leave the node half restarted;
        and it keeps the node until the restart is done, or the next job's phase would
        reach the new trainer before that job is registered there or marked to roll back.
        """
        restart = asyncio.ensure_future(self.on_trainer_lost(node, self.name, why))
        try:
            await asyncio.shield(restart)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(restart)
            raise

    @property
    def rollbacks(self) -> int:
        return len(self.record.rollbacks)

    @property
    def rollback_reason(self) -> str:
        """Set (to why) by the multiplexer when the job's newest state died with a trainer
        process: its next train phase goes back to its last checkpoint (`_roll_back`)."""
        return self._rollback_reason

    @rollback_reason.setter
    def rollback_reason(self, why: str) -> None:
        # Mirrored on the record, which `mux status` shows: set, the mark; "", the mark dropped.
        self._rollback_reason = why
        if why:
            rollback_mark.mark(self.record, self.run_dir, why)
        else:
            rollback_mark.unmark(self.record)

    async def _roll_back(self, node: str) -> dict:
        """The job's newest state died with a trainer process: back to its last checkpoint.

        Runs under the train permit, in place of a step. The batch in hand was
        sampled with weights newer than that checkpoint, so it goes; the trainer
        loads the checkpoint (cold) and writes its weights for the engines; the
        buffer starts again from the checkpoint's state, so the steps since are
        taken again from the same prompts and the run goes on as a resumed solo
        run would. Before, the job failed and its completed steps were lost with it.
        """
        # Taken past the setter: the record shows the mark until the roll-back has ended.
        why, self._rollback_reason = self._rollback_reason, ""
        self.record.phase = "rolling back"
        was = self.version
        waiting_on = "trainer"  # or "buffer", as in a train phase
        try:
            async with asyncio.timeout(self.phase_timeout_s):
                ckpt = latest_checkpoint(self.run_dir / "checkpoints")
                to = rollback_mark.checkpoint_step(ckpt)
                run_state = load_run_state(ckpt) if ckpt is not None else None
                slot = self.slots[node]
                await slot.drop_state.remote(self.name)  # no copy newer than the checkpoint is kept
                switch = await slot.switch_in.remote(self.name)  # cold from the checkpoint (fresh if none)
                self.state_node = node
                if to:
                    await slot.write_weights.remote(self.name, self._weights_path(to))
                waiting_on = "buffer"
                # The next rollout builds the workers again over the new buffer.
                await self._restart_buffer(run_state["buffer"] if run_state is not None else None)
                await pin_actors([self.buffer], self.rollout_cpus)
        except (TimeoutError, ray.exceptions.RayActorError) as err:
            if waiting_on == "trainer" and self.on_trainer_lost is not None:
                # The new trainer is wedged or dead too: the node gets another one (and the
                # jobs that trained on this one since roll back), as after a train phase.
                await self._trainer_lost(node, f"rolling back on {node}: its trainer did not answer "
                                               f"({type(err).__name__})")
                self.rollback_reason = ""  # this job fails: it found the trainer lost in its roll-back
            rollback_mark.unmark(self.record)
            raise JobFailed(f"rolling back to its last checkpoint failed ({type(err).__name__}) after: {why} "
                            "(its checkpoints stay in its run directory)") from None
        for p in self.weights_dir.glob("weights_v*.safetensors"):  # files of the steps rolled back
            with contextlib.suppress(ValueError, OSError):
                if int(p.name.removeprefix("weights_v").split(".")[0]) > to:
                    p.unlink()
        self.version = self.record.step = to
        del self.record.step_ends[max(0, to - self.record.resumed_from):]  # one end per step since the start
        if self._held_row is not None and self._held_row[0] > to:  # a step rolled back is taken again
            self._held_row = None
        self._groups, self._rolled_back = [], True
        if self._log is not None:
            await asyncio.to_thread(self._log.truncate_after, to)
        self.record.rollbacks.append(f"step {was} -> {to}: {why}")
        rollback_mark.unmark(self.record)
        record = asdict(switch)
        self.record.switches.append(record)
        return record
