"""The waits a job's phase ends on, each with a limit: engines drained, the step's batch.

A wait that passes its limit, or a rollout worker that stops meanwhile, fails the
job (`JobFailed`) with the reason: the multiplexer frees its nodes and goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from roll_agentic.rollout.buffer import RolloutFailing


class JobFailed(RuntimeError):
    pass


async def drain(engines: list, timeout_s: float = 120.0) -> None:
    """Waits until no request is in any engine: the pool is handed over empty."""
    deadline = time.monotonic() + timeout_s
    while True:
        loads = await asyncio.gather(*(e.load.remote() for e in engines), return_exceptions=True)
        if all(isinstance(x, int) and x == 0 for x in loads if not isinstance(x, BaseException)):
            return
        if time.monotonic() > deadline:
            raise JobFailed(f"engines still busy after {timeout_s}s: {loads}")
        await asyncio.sleep(0.02)


async def await_batch(get_batch: Awaitable, worker_runs: list, timeout_s: float) -> list:
    """The step's batch (`get_batch`, the buffer's call); JobFailed if a rollout worker
    (`worker_runs`, their run calls) stops first or the phase runs past `timeout_s`."""
    batch = asyncio.ensure_future(get_batch)
    watch = [asyncio.ensure_future(r) for r in worker_runs]
    try:
        done, _ = await asyncio.wait([batch, *watch], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if batch in done:
            try:
                return batch.result()
            except RolloutFailing as err:  # every group failed: the buffer's message, not Ray's traceback
                raise JobFailed(str(getattr(err, "cause", err))) from None
        for w in watch:
            if w in done:
                err = w.exception()
                raise JobFailed(f"a rollout worker stopped mid-phase: {type(err).__name__ if err else 'exit'}")
        raise JobFailed(f"rollout phase exceeded phase_timeout_s={timeout_s}")
    finally:
        for w in watch:
            w.cancel()
        batch.cancel()
