"""Function logs: rotated by size, their tail read from the end of the file.

`/_emulator/logs` read the whole file (it grew without limit) on the event loop to print a
few lines."""

from __future__ import annotations

import asyncio
import os

from serverless.logfiles import FunctionLogs, log_path, previous_path, read_tail_lines, tail
from tests.serverless.conftest import in_process


def test_a_tail_is_read_from_the_end_of_a_huge_file(tmp_path):
    """A 64 GiB file (sparse: it takes no disk) whose last lines are asked for: reading it
    all would take minutes and the memory of the machine; the tail reads a block or two."""
    path = tmp_path / "f.log"
    with open(path, "wb") as f:
        f.truncate(64 * 2**30)
        f.seek(0, os.SEEK_END)
        f.write(b"\n".join(b"line %d" % i for i in range(5000)) + b"\n")
    assert read_tail_lines(path, 3) == ["line 4997", "line 4998", "line 4999"]
    assert read_tail_lines(path, 2, block=7) == ["line 4998", "line 4999"]  # blocks cut lines: whole ones only


def test_short_files_and_odd_endings(tmp_path):
    path = tmp_path / "f.log"
    assert read_tail_lines(path, 5) == []  # none yet
    path.write_bytes(b"a\nb\nc")
    assert read_tail_lines(path, 5) == ["a", "b", "c"]
    assert read_tail_lines(path, 1) == ["c"]
    path.write_bytes(b"\xff\xfe bad utf-8\nok\n")
    assert read_tail_lines(path, 2) == ["\ufffd\ufffd bad utf-8", "ok"]


def test_a_log_is_rotated_by_size_and_its_tail_spans_the_rotation(tmp_path):
    logs = FunctionLogs(tmp_path, max_bytes=1000)
    for i in range(100):
        logs.write("fn", f"entry {i:03d} " + "x" * 80 + "\n")
    logs.close()
    current, previous = log_path(tmp_path, "fn"), previous_path(log_path(tmp_path, "fn"))
    # one previous file kept: at most about twice the limit on disk, whatever was written
    assert current.stat().st_size < 1000 and previous.stat().st_size < 1000 + 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fn.log", "fn.log.1"]
    last = tail(tmp_path, "fn", 12).splitlines()
    assert [line.split()[1] for line in last] == [f"{i:03d}" for i in range(88, 100)]
    assert tail(tmp_path, "absent", 5) == ""


def test_the_logs_route_serves_the_tail_across_a_rotation(tmp_path):
    async def scenario() -> str:
        async with in_process(tmp_path) as http:
            log_dir = tmp_path / "logs"
            previous_path(log_path(log_dir, "gone")).write_text("old 1\nold 2\n")
            log_path(log_dir, "gone").write_text("new 1\n")
            resp = await http.get("/_emulator/logs/gone?lines=2")
            assert resp.status == 200
            return await resp.text()

    assert asyncio.run(scenario()) == "old 2\nnew 1\n"
