"""Shared-memory segments of engines killed without shutdown (roll_agentic/engine/shm_sweep.py).

Unit tests use real small segments (multiprocessing.shared_memory in /dev/shm) and
records in a temporary folder: a record whose processes are all gone has its
segments unlinked; a live one, a segment nobody recorded, a segment whose name now
belongs to another file, and an unreadable record are left alone. The slow test
SIGKILLs a real vLLM engine's Ray actor, shows its segments stay, and that the
next engine start sweeps them (and a clean shutdown unlinks its own).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import psutil
import pytest

from roll_agentic.engine import shm_sweep
from roll_agentic.engine.shm_sweep import SegmentRecorder, ShmRecord, sweep

SHM = shm_sweep.SHM_DIR
pytestmark = pytest.mark.skipif(not SHM.is_dir() or not os.access(SHM, os.W_OK),
                                reason="needs a writable /dev/shm")


@pytest.fixture
def segments():
    """Makes small real segments (untracked: the test decides who unlinks them); unlinks
    whatever is left at the end."""
    made: list[shared_memory.SharedMemory] = []

    def make() -> str:
        shm = shared_memory.SharedMemory(create=True, size=4096)
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001 - no tracker cleanup at exit
        made.append(shm)
        return shm.name

    yield make
    for shm in made:
        shm.close()
        (SHM / shm.name).unlink(missing_ok=True)


def _inode(name: str) -> int:
    return os.stat(SHM / name).st_ino


def _dead_pid() -> tuple[int, float]:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(p.pid).create_time()
    p.wait()
    return p.pid, started


def _write(records: Path, rec: ShmRecord, name: str | None = None) -> Path:
    records.mkdir(exist_ok=True)
    path = records / (name or f"{rec.owner_pid}-0.json")
    path.write_text(rec.to_json())
    return path


def test_a_dead_owners_segments_are_swept_and_its_record_removed(tmp_path, segments):
    a, b = segments(), segments()
    pid, started = _dead_pid()
    path = _write(tmp_path, ShmRecord(pid, {pid: started}, {a: _inode(a), b: _inode(b)}))
    report = sweep(records=tmp_path)
    assert sorted(report.swept) == sorted([a, b])
    assert not (SHM / a).exists() and not (SHM / b).exists()
    assert not path.exists() and report.dead_records == [path.name]


def test_a_live_owners_segments_are_kept(tmp_path, segments):
    a = segments()
    me = os.getpid()
    path = _write(tmp_path, ShmRecord(me, {me: psutil.Process(me).create_time()}, {a: _inode(a)}))
    report = sweep(records=tmp_path)
    assert report.swept == [] and report.live_records == [path.name]
    assert (SHM / a).exists() and path.exists()


def test_a_record_is_live_while_any_engine_process_of_it_runs(tmp_path, segments):
    a = segments()
    owner, owner_started = _dead_pid()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        rec = ShmRecord(owner, {owner: owner_started, child.pid: psutil.Process(child.pid).create_time()},
                        {a: _inode(a)})
        _write(tmp_path, rec)
        assert sweep(records=tmp_path).swept == [] and (SHM / a).exists()
    finally:
        child.kill()
        child.wait()
    assert sweep(records=tmp_path).swept == [a]  # both gone now


def test_a_reused_pid_does_not_keep_a_record_alive(tmp_path, segments):
    a = segments()
    me = os.getpid()  # alive, but started at another time than the recorded process
    _write(tmp_path, ShmRecord(me, {me: psutil.Process(me).create_time() - 1000.0}, {a: _inode(a)}))
    assert sweep(records=tmp_path).swept == [a]


def test_unrecorded_segments_and_reused_names_are_never_unlinked(tmp_path, segments):
    recorded, unrecorded = segments(), segments()
    pid, started = _dead_pid()
    # the recorded name now belongs to another file (another inode): not the segment recorded
    _write(tmp_path, ShmRecord(pid, {pid: started}, {recorded: _inode(recorded) + 1}))
    report = sweep(records=tmp_path)
    assert report.swept == [] and report.dead_records  # the stale record itself goes
    assert (SHM / recorded).exists() and (SHM / unrecorded).exists()


@pytest.mark.parametrize("content", [
    "{not json",
    json.dumps({"version": 1, "owner_pid": 1}),  # missing fields
    json.dumps({"version": 7, "owner_pid": 1, "processes": {}, "segments": {}}),
    "SEGMENTS",  # filled in below: a path instead of a psm_ name
])
def test_an_unreadable_record_is_ignored_with_a_warning(tmp_path, segments, caplog, content):
    a, b = segments(), segments()
    pid, started = _dead_pid()
    if content == "SEGMENTS":
        content = json.dumps({"version": 1, "owner_pid": pid, "processes": {str(pid): started},
                              "segments": {f"../../dev/shm/{a}": _inode(a)}})
    bad = _write(tmp_path, ShmRecord(pid), name=f"{pid}-0.json")
    bad.write_text(content)
    good = _write(tmp_path, ShmRecord(pid, {pid: started}, {b: _inode(b)}), name=f"{pid}-1.json")
    with caplog.at_level(logging.WARNING, logger="roll_agentic.engine.shm_sweep"):
        report = sweep(records=tmp_path)
    assert report.bad_records == [bad.name]
    assert any("unreadable record" in r.getMessage() for r in caplog.records)
    assert (SHM / a).exists() and bad.exists()  # nothing of it touched
    assert report.swept == [b] and not good.exists()  # the others still swept


def test_a_record_naming_another_owner_than_its_file_is_ignored(tmp_path, segments):
    a = segments()
    pid, started = _dead_pid()
    _write(tmp_path, ShmRecord(pid, {pid: started}, {a: _inode(a)}), name=f"{os.getpid()}-0.json")
    report = sweep(records=tmp_path)
    assert report.swept == [] and len(report.bad_records) == 1 and (SHM / a).exists()


def test_no_records_folder_is_no_error(tmp_path):
    assert sweep(records=tmp_path / "absent") == shm_sweep.SweepReport()
    assert shm_sweep.records_dir(tmp_path / "absent") is None  # no shm folder: nothing to do


# A stand-in for a process that starts an engine: it records while a child (the
# "engine core") creates a segment and keeps it mapped; one made by itself before the
# recorder started, and one made by an unrelated process meanwhile, are not recorded.
OWNER = textwrap.dedent("""
    import subprocess, sys, time
    from multiprocessing import resource_tracker, shared_memory
    from pathlib import Path
    from roll_agentic.engine.shm_sweep import SegmentRecorder

    CHILD = '''
    import sys, time
    from multiprocessing import resource_tracker, shared_memory
    shm = shared_memory.SharedMemory(create=True, size=8192)
    resource_tracker.unregister(shm._name, "shared_memory")  # as killed vLLM: nobody unlinks it
    print(shm.name, flush=True)
    time.sleep(600)
    '''
    rec = SegmentRecorder(records=Path(sys.argv[1]), poll_s=0.05)
    rec.start()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    name = child.stdout.readline().strip()
    time.sleep(0.3)  # a poll or two
    rec.stop()
    print(name, child.pid, rec.path, flush=True)
    time.sleep(600)
""")


def test_a_recorder_records_its_engine_processes_segments_and_a_later_sweep_unlinks_them(
        tmp_path, segments):
    unrelated = segments()  # exists before the recorder starts
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    try:
        line = owner.stdout.readline().split()
        assert len(line) == 3, f"owner failed: {owner.poll()}"
        name, child_pid, path = line[0], int(line[1]), Path(line[2])
        rec = ShmRecord.from_json(path.read_text())
        assert rec.owner_pid == owner.pid and child_pid in rec.processes
        assert rec.segments == {name: _inode(name)}  # not `unrelated`, mapped by nobody of it
        assert sweep(records=tmp_path).live_records == [path.name]
        os.kill(owner.pid, signal.SIGKILL)  # the owner dies first, the engine process lives on
        owner.wait()
        assert sweep(records=tmp_path).swept == [] and (SHM / name).exists()
        os.killpg(owner.pid, signal.SIGKILL)  # the engine process (and its resource tracker)
        deadline = time.monotonic() + 10
        while (any(shm_sweep.process_start_time(p) is not None for p in rec.processes)
               and time.monotonic() < deadline):
            time.sleep(0.05)  # a zombie until init reaps it counts as gone
        report = sweep(records=tmp_path)
        assert report.swept == [name] and not (SHM / name).exists() and not path.exists()
        assert (SHM / unrelated).exists()
    finally:
        try:
            os.killpg(owner.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        owner.wait()


def test_release_unlinks_what_was_recorded_and_removes_the_record(tmp_path, segments):
    a = segments()
    rec = SegmentRecorder(records=tmp_path)
    rec.start()
    rec.record.segments[a] = _inode(a)  # as if an engine process had mapped it
    rec.stop()
    assert rec.path is not None and rec.path.exists()
    assert rec.release() == [a]
    assert not (SHM / a).exists() and not rec.path.exists()
    rec.scan()  # after release: writes nothing back
    assert not rec.path.exists()


# -- a real vLLM engine -------------------------------------------------------------
def _engine_info(host) -> tuple[int, list[int], dict[str, int]]:
    """In the actor: its pid, the engine processes its recorder found below it, and the
    segments it holds. (Read from the record, not by process name: vLLM titles its
    processes "VLLM::..." at some point of their start, and once the list came back empty.)"""
    shm = host.engine._shm  # noqa: SLF001
    return os.getpid(), [p for p in shm.record.processes if p != os.getpid()], shm.segments


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_a_sigkilled_vllm_engines_segments_are_swept_by_the_next_engine_start(tiny_model_path):
    import ray

    from roll_agentic.cluster import init_ray
    from roll_agentic.config import EngineConfig, RayConfig
    from roll_agentic.engine.host import engine_actor_class

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    cfg = EngineConfig(backend="vllm", max_model_len=512, kv_cache_gib=0.25)
    started = init_ray(RayConfig(num_cpus=2))
    handles = []
    try:
        first = engine_actor_class(1.0).options(max_restarts=0).remote("vllm", tiny_model_path, cfg)
        handles.append(first)
        ray.get(first.ping.remote(), timeout=300)
        pid, kids, segs = ray.get(first.__ray_call__.remote(_engine_info), timeout=60)
        assert kids and len(segs) >= 2, segs  # the engine core's and the worker's queues
        assert all((SHM / n).exists() for n in segs)
        records = shm_sweep.records_dir()
        assert records is not None and list(records.glob(f"{pid}-*.json"))

        os.kill(pid, signal.SIGKILL)  # no shutdown
        deadline = time.monotonic() + 60
        while any(shm_sweep.process_start_time(p) is not None for p in [pid, *kids]):
            assert time.monotonic() < deadline, "the engine's processes outlived its actor"
            time.sleep(0.2)
        left = sorted(n for n in segs if (SHM / n).exists() and _inode(n) == segs[n])
        assert left == sorted(segs), "vLLM unlinked them itself: nothing to sweep"

        second = engine_actor_class(1.0).options(max_restarts=0).remote("vllm", tiny_model_path, cfg)
        handles.append(second)
        ray.get(second.ping.remote(), timeout=300)
        assert not any((SHM / n).exists() for n in segs), "the next engine start did not sweep them"
        assert not list(records.glob(f"{pid}-*.json"))

        pid2, _, segs2 = ray.get(second.__ray_call__.remote(_engine_info), timeout=60)
        assert len(segs2) >= 2 and not set(segs2) & set(segs)
        ray.get(second.shutdown.remote(), timeout=120)  # a clean shutdown leaves none either
        assert not any((SHM / n).exists() for n in segs2)
        assert not list(records.glob(f"{pid2}-*.json"))
    finally:
        for h in handles:
            ray.kill(h)
        if started:
            ray.shutdown()


def test_a_failed_start_up_unlinks_its_segments_once_its_processes_are_gone(tmp_path, segments):
    from roll_agentic.engine.shm_sweep import release_after_failed_start

    a, b = segments(), segments()
    gone, gone_started = _dead_pid()
    rec = SegmentRecorder(records=tmp_path)
    rec.start()
    rec.record.processes[gone] = gone_started  # the engine core of a start-up that failed
    rec.record.segments[a] = _inode(a)
    release_after_failed_start(rec, wait_s=1.0)
    assert not (SHM / a).exists() and rec.path is not None and not rec.path.exists()

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # an engine process still runs: its segments wait for a later sweep
        rec = SegmentRecorder(records=tmp_path)
        rec.start()
        rec.record.processes[child.pid] = psutil.Process(child.pid).create_time()
        rec.record.segments[b] = _inode(b)
        release_after_failed_start(rec, wait_s=0.2)
        assert (SHM / b).exists() and rec.path is not None and rec.path.exists()
    finally:
        child.kill()
        child.wait()
