"""vLLM's engine-core and worker processes: found below this process, and reaped at shutdown.

A vLLM engine forks its core and workers; a shutdown that returned while they
were still exiting left zombies, or (a stuck worker) a process holding shared
memory and CPU after its engine was gone.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from typing import Any

log = logging.getLogger(__name__)


def engine_processes() -> list[Any]:
    """vLLM's engine-core and worker processes below this one."""
    import psutil

    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name().startswith("VLLM"):
                found.append(p)
        except psutil.Error:
            pass
    return found


async def reap(procs: list[Any], timeout_s: float = 10.0) -> None:
    """Waits until the engine's processes are gone (killing stragglers) and
    reaps our direct child, so no engine process or zombie outlives shutdown."""
    import psutil

    def alive() -> list[Any]:
        multiprocessing.active_children()  # joins finished children: no zombie
        out = []
        for p in procs:
            try:  # our own zombie counts until reaped; a grandchild's is init's to reap
                if p.is_running() and (p.status() != psutil.STATUS_ZOMBIE or p.ppid() == os.getpid()):
                    out.append(p)
            except psutil.Error:
                pass
        return out

    deadline = time.monotonic() + timeout_s
    while (left := alive()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for p in left:
        log.warning("VLLMEngine.shutdown: killing leftover process %s", p.pid)
        try:
            p.kill()
        except psutil.Error:
            pass
    if left:
        await asyncio.sleep(0.1)
        alive()
