"""One process per run folder: an exclusive lock held from start-up to close.

Two processes on one run folder (a scheduler restarting a preempted job while
the old process still saves in its SIGTERM grace period, a resume typed twice,
two fresh runs named by the same second) both loaded the same step, both wrote
and truncated `metrics.jsonl`, and each one's save swept the other's checkpoint
in progress. `fcntl.flock` is released by the kernel when the process ends,
however it ends, so a killed run never leaves its folder locked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".lock"  # in the run folder; holds the pid of the process that has it


class RunDirInUse(RuntimeError):
    """Another live process holds the run folder."""


class RunDirLock:
    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None
        self.taken = False  # this process held it: the folder is its own to clean up

    def acquire(self) -> None:
        """Takes the lock, or RunDirInUse naming the process that has it."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirInUse(
                f"run folder {self.path.parent} is in use by another process (pid {holder}): wait for it to "
                "end (a stopped run saves its checkpoint first), or pass another run_name") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd, self.taken = fd, True

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def fresh_run_name(root: Path, prefix: str = "") -> str:
    """`prefix` and a timestamp, with -2, -3, ... after it when a run of the same second has that folder."""
    return free_name(root, prefix + dt.datetime.now().strftime("%Y%m%d-%H%M%S"))


def free_name(root: Path, base: str) -> str:
    """`base`, or the first of `base`-2, `base`-3, ... that names nothing under `root`."""
    name, n = base, 1
    while (Path(root) / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name
