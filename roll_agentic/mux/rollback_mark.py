"""A job's pending roll-back on its record, from the mark to the roll-back's end.

The multiplexer marks a job whose newest state died with a trainer process
(`Multiplexer._trainer_lost` sets `JobRunner.rollback_reason`); the job goes
back to its last checkpoint only at its next train phase, which may be a
whole round of its group later. Meanwhile `mux status` showed it healthy, at
a step it had already lost: the record now says where it is going back to.
"""

from __future__ import annotations

from pathlib import Path

from roll_agentic.mux.job_state import JobRecord, PendingRollback
from roll_agentic.train.checkpoint import latest_checkpoint


def checkpoint_step(ckpt: Path | None) -> int:
    """The step a checkpoint directory (`step_000004`) holds; 0 for none (a roll-back starts afresh)."""
    return int(ckpt.name.removeprefix("step_")) if ckpt is not None else 0


def mark(record: JobRecord, run_dir: Path, why: str) -> None:
    """The record shows the roll-back to come, to the checkpoint `_roll_back` would take now."""
    record.pending_rollback = PendingRollback(checkpoint_step(latest_checkpoint(run_dir / "checkpoints")), why)


def unmark(record: JobRecord) -> None:
    """Rolled back (the record's `rollbacks` says so), the mark dropped, or the job over."""
    record.pending_rollback = None
