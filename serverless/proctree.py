"""Whole process trees: an environment's worker and everything its handler started.

Killing the worker's process group missed a process the handler started in a
session of its own (rewards/code_exec.py starts tests with
`start_new_session=True`): it survived the timeout, the delete or the
eviction, re-parented to init. Lambda tears the whole sandbox down, so the
emulator kills the tree: each worker makes itself a child subreaper
(`become_subreaper`), so orphans of its descendants are re-parented to it
rather than to init and stay findable under it, and `kill_tree` walks
/proc/<pid>/task/*/children from the worker down and SIGKILLs every
process before the worker itself.

Both are Linux-only (prctl, and /proc's children lists, which need a kernel
built with CONFIG_PROC_CHILDREN, as distribution kernels are); elsewhere
(macOS) they do nothing more than killing the worker and its process group,
which is what the emulator did before.

A cost of the subreaper: an orphan that exits while its environment lives
stays a zombie under the worker (nothing there waits for it; reaping them
blindly would steal the exit status of a child the handler still means to
wait for) until the environment stops and init reaps them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
# Each round kills what it found; children of a process killed meanwhile are re-parented to the
# worker (the subreaper) and found by the next round. Bounded, should a handler fork in a loop.
MAX_ROUNDS = 20


def become_subreaper() -> bool:
    """Makes this process the child subreaper of its descendants; False where the OS has none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc symbol to call: run without it
        return False


def children(pid: int) -> set[int]:
    """The direct children of `pid` (every thread's), from /proc; empty where there is no /proc."""
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone already, or not Linux
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(c) for c in f.read().split())
        except (OSError, ValueError):  # the thread exited meanwhile
            continue
    return out


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, found through /proc's children lists."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def kill_tree(pid: int, reaped: bool = False) -> None:
    """SIGKILLs every descendant of `pid`, then `pid` and its process group.

    Descendants go first: once the worker is dead its children are
    re-parented away from it and can no longer be found under it. `reaped`:
    the worker has been waited for, so its pid may belong to another process
    by now; only its group is killed (a pid stays unallocated while a group
    of that id has members).
    """
    if not reaped:
        killed: set[int] = set()
        for _ in range(MAX_ROUNDS):
            fresh = descendants(pid) - killed
            if not fresh:
                break
            for child in fresh:
                _kill(child)
            killed |= fresh
        _kill(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the group too: the only net on an OS without /proc
