"""Decode throughput of one engine driven directly: no Ray, no router, no envs.

The baseline that `roll-agentic bench engine` sets the full framework path
against: every prompt is submitted at once, so the engine batches as hard as
it can, and the figure is generated tokens per wall-clock second.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from roll_agentic.engine.protocol import RolloutEngine, SamplingParams


async def raw_engine_tokens_per_s(engine: RolloutEngine, prompts: list[list[int]],
                                  sampling: SamplingParams, warmup: bool = True) -> float:
    """Generated tokens per second for `prompts` submitted concurrently.

    Runs in the event loop the engine lives in (engines are async). With
    `warmup`, a two-token pass over the same prompts first takes the engine's
    first-call costs (kernel set-up, lazy allocation) out of the measurement;
    the engine's prefix cache (if it has one) is then emptied, so the measured
    pass prefills these prompts as the framework did when they were new,
    instead of finding them cached by the warm-up or the framework's own run.
    """
    if not prompts:
        raise ValueError("raw_engine_tokens_per_s: no prompts")
    tag = uuid.uuid4().hex[:8]
    if warmup:  # same batch shape, two tokens each
        short = SamplingParams(max_tokens=2, temperature=sampling.temperature, top_p=sampling.top_p)
        await asyncio.gather(*(engine.generate(p, short, f"raw-{tag}-warm{i}") for i, p in enumerate(prompts)))
    reset = getattr(engine, "reset_prefix_cache", None)
    if reset is not None:
        await reset()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(p, sampling, f"raw-{tag}-{i}")
                                     for i, p in enumerate(prompts)))
    elapsed = time.perf_counter() - t0
    return sum(len(r.token_ids) for r in results) / elapsed
