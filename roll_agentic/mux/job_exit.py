"""How a job's lifecycle in the multiplexer ends: stopped checkpointed, then cleaned up.

`stopped`: the job ends for `Multiplexer.stop`, its newest whole step saved
(job_stop.py).

`run_to_end`: the clean-up -- trainer slots released, the job out of its
group (`GroupBook.remove`, which frees its nodes), its runner closed
(workers, reward emulator, weights files) -- runs to its end however often
the task is cancelled meanwhile. A second `mux cancel`, or `stop`, reaching
the task there cut it short: a phantom group member kept its nodes and
residency, and its reward emulator ran on. The multiplexer also leaves jobs
in clean-up out of cancel and stop (`closing`); this covers any other cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.rollback_mark import checkpoint_step
from roll_agentic.train.checkpoint import latest_checkpoint

if TYPE_CHECKING:
    from roll_agentic.mux.job_runner import JobRunner

T = TypeVar("T")


async def stopped(rec: JobRecord, runner: JobRunner, timeout_s: float) -> None:
    """The job ends for `stop`, its newest whole step checkpointed (job_stop.py)."""
    if runner.version >= runner.cfg.trainer.total_steps:  # all its steps taken: cut in its last evaluation
        rec.state, rec.reason = JobState.DONE, "stopped before its last evaluation"
        return
    try:
        step = await asyncio.wait_for(runner.checkpoint_for_stop(), timeout_s)
        failed = ""
    except Exception as err:  # noqa: BLE001 - its earlier checkpoints still stand
        step = checkpoint_step(latest_checkpoint(runner.run_dir / "checkpoints"))
        failed = f"; saving step {runner.version} failed ({type(err).__name__}: {err})"
    rec.state = JobState.STOPPED
    saved = f"its checkpoint of step {step}" if step else "no checkpoint (it starts over)"
    rec.reason = (f"stopped at step {runner.version}{failed}; `mux run --resume` (`mux submit --resume` for a "
                  f"job submitted so) goes on from {saved}")


async def run_to_end(aw: Awaitable[T]) -> T:
    """`aw`'s result, awaited to its end even if the awaiting task is cancelled meanwhile
    (once or more): those cancels are absorbed, as the task ends with `aw` anyway."""
    inner = asyncio.ensure_future(aw)  # its own task: a cancel of ours never reaches it
    while not inner.done():
        try:
            await asyncio.shield(inner)
        except asyncio.CancelledError:
            if inner.cancelled():  # cancelled itself (not through us): not ours to absorb
                raise
            task = asyncio.current_task()
            if task is not None:  # absorbed: an `asyncio.timeout` later in the task must not take it for its own
                task.uncancel()
    return inner.result()
