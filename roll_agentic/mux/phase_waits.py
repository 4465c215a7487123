"""The waits a job's phase ends on, each with a limit: engines drained, the step's batch.

A wait that passes its limit, or a rollout worker that stops meanwhile, fails the
job (`JobFailed`) with the reason: the multiplexer frees its nodes and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable

from roll_agentic.rollout.buffer import RolloutFailing

# A held rollout phase may run this much past phase_timeout_s (the batch's own limit) before
# it fails its job: the weight loads and drains around the batch take time of their own.
ROLLOUT_LOAD_MARGIN_S = 180.0


class JobFailed(RuntimeError):
    pass


@contextlib.asynccontextmanager
async def rollout_limit(kind: str, phase_timeout_s: float, nodes: list[str], waits: int = 1) -> AsyncIterator[None]:
    """The limit of a whole held rollout phase: past it, JobFailed, and the node is let go
    (the batch wait had a limit, but a wedged engine or buffer call held the node forever).
    `waits`: the limited waits in it (2 with an evaluation: it has phase_timeout_s of its own)."""
    limit = asyncio.timeout(waits * phase_timeout_s + ROLLOUT_LOAD_MARGIN_S)
    try:
        async with limit:
            yield
    except TimeoutError:
        if not limit.expired():  # not ours: raised in the phase, said there
            raise
        raise JobFailed(f"{kind} phase exceeded {waits}x phase_timeout_s={phase_timeout_s} (+{ROLLOUT_LOAD_MARGIN_S:.0f}s "
                        f"for weight loads) on {', '.join(nodes)}: an engine, the buffer or a worker did not "
                        "answer (its checkpoints stay in its run directory)") from None


async def drain(engines: list, timeout_s: float = 120.0) -> None:
    """Waits until no request is in any engine: the pool is handed over empty.

    An engine whose load call fails is not drained: JobFailed naming the error (those
    were left out, so engines that all failed counted as drained). A load call that
    does not answer counts against `timeout_s` too, not only a busy engine.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            loads = await asyncio.wait_for(asyncio.gather(*(e.load.remote() for e in engines), return_exceptions=True),
                                           max(deadline - time.monotonic(), 0.1))
        except TimeoutError:
            raise JobFailed(f"engines did not say their load within {timeout_s}s") from None
        failed = [x for x in loads if isinstance(x, BaseException)]
        if failed:
            first = (str(failed[0]).strip().splitlines() or [""])[0]  # Ray's errors run to a page
            raise JobFailed(f"{len(failed)} of {len(loads)} engines failed their load check: "
                            f"{type(failed[0]).__name__}: {first}")
        if all(x == 0 for x in loads):
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
