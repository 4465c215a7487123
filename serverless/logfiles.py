"""Each function's log file (`<state_dir>/logs/<name>.log`): appended, rotated by size, read from its end.

A log grew without limit (a reward called millions of times in a long run)
and `/_emulator/logs` read all of it to print a few lines, on the event
loop, stalling every other request meanwhile. Now a log past `max_bytes` is
renamed to `<name>.log.1` (replacing the previous one), so a function keeps
at most about twice that on disk, and a tail is read backwards from the end
of the file, a block at a time, off the event loop (the caller's
asyncio.to_thread).

Not covered: a worker writes stray output (a child process's, a C
library's) to the log through its own file descriptor, opened when it
started; after a rotation that output goes to `<name>.log.1` until the
environment stops (keep-alive), and a rotation meanwhile unlinks that file
while the worker still holds it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

LOG_MAX_BYTES = 32 * 1024 * 1024
TAIL_BLOCK_BYTES = 64 * 1024


def log_path(log_dir: Path, name: str) -> Path:
    return Path(log_dir) / f"{name}.log"


def previous_path(path: Path) -> Path:
    return path.with_name(path.name + ".1")


class FunctionLogs:
    """The open log files of the functions invoked, one per function, line-buffered."""

    def __init__(self, log_dir: Path, max_bytes: int = LOG_MAX_BYTES) -> None:
        self.log_dir = Path(log_dir)
        self.max_bytes = max_bytes
        self._files: dict[str, TextIO] = {}

    def write(self, name: str, text: str) -> None:
        f = self._files.get(name)
        if f is None:
            # errors="replace": a lone surrogate printed by the handler failed the write, and
            # with it the invocation (a 500 ServiceException, which callers retry: it ran again)
            f = self._files[name] = open(log_path(self.log_dir, name), "a", buffering=1,  # noqa: SIM115
                                         encoding="utf-8", errors="replace")
        f.write(text)
        # fstat, not a count of what was written here: workers append their stray output too
        if os.fstat(f.fileno()).st_size >= self.max_bytes:
            self._rotate(name)

    def _rotate(self, name: str) -> None:
        self.forget(name)  # the next write opens a fresh file
        path = log_path(self.log_dir, name)
        os.replace(path, previous_path(path))

    def forget(self, name: str) -> None:
        f = self._files.pop(name, None)
        if f is not None:
            f.close()

    def close(self) -> None:
        for name in list(self._files):
            self.forget(name)


def read_tail_lines(path: Path, lines: int, block: int = TAIL_BLOCK_BYTES) -> list[str]:
    """The last `lines` lines of a file (fewer if it has fewer), reading blocks backwards
    from its end until enough have been read; [] for a missing file."""
    if lines < 1:
        return []
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below; a missing file is no error
    except FileNotFoundError:
        return []
    with f:
        pos = f.seek(0, os.SEEK_END)
        data = b""
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    out = data.decode(errors="replace").splitlines()
    if pos > 0:
        out = out[1:]  # read from the middle of a line: not a whole one
    return out[-lines:]


def tail(log_dir: Path, name: str, lines: int) -> str:
    """The last `lines` lines of a function's log, reaching into the rotated file if the
    current one holds fewer; "" when there is none. Blocking file IO: run it off the loop."""
    path = log_path(log_dir, name)
    out = read_tail_lines(path, lines)
    if len(out) < lines:
        out = read_tail_lines(previous_path(path), lines - len(out)) + out
    text = "\n".join(out)
    return text + ("\n" if text else "")
