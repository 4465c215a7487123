"""One process per run folder: a second one is refused, naming the first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roll_agentic.train.run_lock import RunDirInUse, RunDirLock


def test_a_second_process_on_the_run_folder_is_refused_naming_the_first(tmp_path):
    """Two processes on one run folder both loaded the same step and swept each other's
    checkpoint in progress."""
    held = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from roll_agentic.train.run_lock import RunDirLock; "
         f"RunDirLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline().strip() == "held"
        with pytest.raises(RunDirInUse, match=rf"run folder {tmp_path} is in use by another process \(pid {held.pid}\)"):
            RunDirLock(tmp_path).acquire()
    finally:
        held.kill()
        held.wait(10)
    # Ended, however it ended: the folder is free again.
    lock = RunDirLock(tmp_path)
    lock.acquire()
    assert lock.taken
    lock.release()
    RunDirLock(tmp_path).acquire()
