"""An environment's processes: all of them stopped with it, and their memory counted.

Linux only: the emulator finds a worker's descendants through /proc and makes the worker a
child subreaper with prctl, and these tests look processes up in /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.serverless.conftest import client_for, create, create_in_process, in_process, make_zip

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are read from /proc")

ESCAPES = """
import subprocess, time

def handler(event, context):
    # its own session, as rewards/code_exec.py starts a test: out of the worker's process group
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(event["pid_to"], "w") as f:
        f.write(str(child.pid))
    time.sleep(30)
"""

SLOW_INIT = """
import os, time

with open(os.environ["PID_TO"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)

def handler(event, context):
    return {}
"""

CHILD_MEMORY = """
import subprocess, sys

def handler(event, context):
    mb = event["child_mb"]
    code = f"b = bytearray({mb} * 2**20); b[::4096] = b'x' * len(b[::4096])" if mb else "pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    return {"ok": True}
"""


def _running(pid: int, comm: str) -> bool:
    """Whether `pid` is a live (not zombie) process named `comm` (a pid reused by another is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()[0]
    return name == comm and state not in ("Z", "X")


def _gone_within(pid: int, comm: str, deadline_s: float = 30.0) -> bool:
    """Polls until the process is gone: what is asserted is that it goes, not how fast."""
    end = time.monotonic() + deadline_s
    while _running(pid, comm) and time.monotonic() < end:
        time.sleep(0.05)
    return not _running(pid, comm)


def _wait_for_pid(path: Path, deadline_s: float = 30.0) -> int:
    end = time.monotonic() + deadline_s
    while not (path.is_file() and path.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.02)
    return int(path.read_text())


def _reap_leftover(pid: int, comm: str) -> None:
    """Stops what the code under test left behind, so a failure leaves no process running."""
    if _running(pid, comm):
        os.kill(pid, 9)


def test_a_timeout_kills_a_child_the_handler_started_in_its_own_session(shared_endpoint, tmp_path):
    """killpg missed it: the sleep survived the timeout, re-parented to init."""
    c = client_for(shared_endpoint)
    create(c, "tree-escape", make_zip({"app.py": ESCAPES}), handler="app.handler", Timeout=1)
    pid_file = tmp_path / "sleep.pid"
    resp = c.invoke(FunctionName="tree-escape", Payload=json.dumps({"pid_to": str(pid_file)}).encode())
    assert resp.get("FunctionError") and json.loads(resp["Payload"].read())["errorType"] == "Sandbox.Timedout"
    pid = int(pid_file.read_text())
    try:
        assert _gone_within(pid, "sleep"), f"sleep {pid} outlived its timed-out environment"
    finally:
        _reap_leftover(pid, "sleep")


def test_a_cold_start_cancelled_part_way_leaves_no_worker(tmp_path):
    """An Event's cold start, cancelled by Invoker.close() (the emulator stopping), left its
    worker running: it belonged to no pool list that close() stops."""
    pid_file = tmp_path / "worker.pid"

    async def scenario() -> tuple[int, str]:
        async with in_process(tmp_path / "state") as http:
            await create_in_process(http, "tree-init", make_zip({"app.py": SLOW_INIT}), "app.handler",
                                    Timeout=60, Environment={"Variables": {"PID_TO": str(pid_file)}})
            resp = await http.post("/2015-03-31/functions/tree-init/invocations", data=b"{}",
                                   headers={"X-Amz-Invocation-Type": "Event"})
            assert resp.status == 202
            pid = await asyncio.to_thread(_wait_for_pid, pid_file)  # the worker is importing
            return pid, Path(f"/proc/{pid}/comm").read_text().strip()
        # leaving the block closes the emulator, which cancels the event mid-start

    pid, comm = asyncio.run(scenario())
    try:
        assert _gone_within(pid, comm), f"worker {pid} outlived its cancelled cold start"
    finally:
        _reap_leftover(pid, comm)


def test_a_childs_memory_counts_against_memory_size(shared_endpoint):
    """Only the worker's own peak was counted: a test process could use any amount, where
    on Lambda the whole sandbox counts. A small child still fits (no double counting)."""
    c = client_for(shared_endpoint)
    create(c, "tree-memory", make_zip({"app.py": CHILD_MEMORY}), handler="app.handler", MemorySize=128, Timeout=30)
    small = c.invoke(FunctionName="tree-memory", Payload=b'{"child_mb": 0}')
    assert "FunctionError" not in small, small["Payload"].read()
    big = c.invoke(FunctionName="tree-memory", Payload=b'{"child_mb": 200}')
    assert big.get("FunctionError") and json.loads(big["Payload"].read())["errorType"] == "Runtime.OutOfMemory"
