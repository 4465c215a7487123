"""Waiting for a failed engine to come back, so a rollout worker routes to it again.

Ray restarts a dead engine actor, but the router keeps an engine marked dead
out of routing for good: each worker that saw an engine fail waits, in a
task of its own, until the engine answers a ping, then marks it alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# An engine out of routing this long gets a warning: a restart that slow is worth knowing of.
SLOW_RESTART_S = 60.0


async def wait_until_back(
    engine: Any,
    router: Any,
    index: int,
    stopped: Callable[[], bool],
    first_wait_s: float = 1.0,
    max_wait_s: float = 30.0,
    ping_timeout_s: float = 10.0,
) -> bool:
    """Ping `engine` until it answers, then mark engine `index` alive in `router`; True then.

    False once its actor is out of restarts (it stays dead, the other engines
    serve) or `stopped()` says the worker is done. There is no give-up count:
    a large model's engine may take many minutes to come back, and one given
    up on stayed out of routing for the rest of the run. Pings back off from
    `first_wait_s` to `max_wait_s` apart.
    """
    import ray

    wait_s, since, warned = first_wait_s, time.monotonic(), False
    while not stopped():
        try:
            await asyncio.wait_for(engine.ping.remote(), ping_timeout_s)
        except ray.exceptions.ActorDiedError:
            return False
        except Exception as err:  # still restarting (unavailable, or the ping timed out)
            out_s = time.monotonic() - since
            if not warned and out_s > SLOW_RESTART_S:
                warned = True
                log.warning("engine %d has not answered for %.0fs (%s): still waiting for it",
                            index, out_s, type(err).__name__)
            await asyncio.sleep(wait_s)
            wait_s = min(max_wait_s, 2.0 * wait_s)
            continue
        await router.mark_alive.remote(index)
        if warned:
            log.info("engine %d answers again after %.0fs: routed to again", index, time.monotonic() - since)
        return True
    return False
