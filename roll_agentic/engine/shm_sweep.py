"""Shared-memory segments that vLLM's processes leave behind, recorded and swept.

vLLM's engine core and workers talk through shared-memory message queues
(`multiprocessing.shared_memory`, files `/dev/shm/psm_<hex>`). vLLM unlinks them
on a clean shutdown only; an engine killed without one (start-up failure, Ctrl-C
during start-up, `TrainingJob.close(graceful=False)`, SIGKILL of its Ray actor)
left two segments per engine in RAM for good (28 KB and more each, growing with
the traffic they carried; their nominal sizes are 160-240 MB).

This module does for them what `train/weight_sync.shared_memory_dir` does for the
weight folders: the process that starts an engine records the segments that the
engine's processes create (`SegmentRecorder`), in a small file keyed by its own
pid under a run-independent folder (`RECORDS_DIR_NAME` in /dev/shm: records live
and die with the segments); a clean shutdown unlinks them (`release`), and the
next engine start anywhere on the machine unlinks those of every record whose
processes are all gone (`sweep`).

Safety: a segment is unlinked only when a record names it, with the inode it had
when recorded (a name reused by a later segment is not it), and only once every
process of that record (the recording process and the engine processes below it,
each identified by pid and start time: a reused pid is not it) is gone. Segments
nobody recorded (other programs', older runs') are never touched. A record that
cannot be read is skipped with a warning.

How a segment is attributed to an engine: it appeared in /dev/shm after the
recorder's start (not in its "before" listing) and is mapped (/proc/<pid>/maps)
by a process that the recording one started since then, or one below that (vLLM's
engine core is its child, the workers the core's). The recorder polls while vLLM
starts, so a start-up that fails or is killed half way still leaves a record of
what it made. Two engines started concurrently by one process cannot be told apart
(each would record the other's segments too); the repo starts one per process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
RECORDS_DIR_NAME = "roll_agentic.shm-records"  # not "roll_agentic-<run>-<pid>": weight_sync's sweep pattern
SEGMENT_PREFIX = "psm_"  # multiprocessing.shared_memory's names
_SEGMENT_NAME = re.compile(r"psm_[0-9A-Za-z_]{1,64}")  # a record never names a path
_RECORD_NAME = re.compile(r"(\d+)-(\d+)\.json")  # <recording pid>-<engine seq in that process>.json
_START_TIME_SLACK_S = 1.0  # psutil's create_time is derived from boot time + ticks: allow jitter
_seq = count()


@dataclass
class ShmRecord:
    """What one engine start recorded.

    owner_pid: the process that started the engine (the record file's key).
    processes: pid -> start time (psutil `create_time`, seconds since the epoch) of the
        owner and of the engine processes below it; the record is live while any is.
    segments: segment name (`psm_...`) -> its inode when recorded.
    """

    owner_pid: int
    processes: dict[int, float] = field(default_factory=dict)
    segments: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"version": 1, "owner_pid": self.owner_pid,
                           "processes": {str(p): t for p, t in self.processes.items()},
                           "segments": self.segments}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ShmRecord:
        """Raises ValueError (or a subclass) for anything that is not a well-formed record."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a version-1 record")
        owner = data["owner_pid"]
        procs = {int(p): float(t) for p, t in dict(data["processes"]).items()}
        segs = {str(n): int(i) for n, i in dict(data["segments"]).items()}
        if not isinstance(owner, int) or owner <= 0 or owner not in procs:
            raise ValueError("bad owner_pid")
        if any(not _SEGMENT_NAME.fullmatch(n) for n in segs):
            raise ValueError("a segment name that is not psm_<hex>")
        return cls(owner, procs, segs)


@dataclass
class SweepReport:
    """swept: segments unlinked; dead_records: record files removed (their processes are
    gone); live_records: records kept (a process of theirs is alive); bad_records: record
    files that could not be read (skipped)."""

    swept: list[str] = field(default_factory=list)
    dead_records: list[str] = field(default_factory=list)
    live_records: list[str] = field(default_factory=list)
    bad_records: list[str] = field(default_factory=list)


def records_dir(shm_dir: Path = SHM_DIR) -> Path | None:
    """The folder of the records, or None where `shm_dir` is no writable folder (then
    there are no segments there to leak, and recording and sweeping do nothing)."""
    if not shm_dir.is_dir() or not os.access(shm_dir, os.W_OK):
        return None
    return shm_dir / RECORDS_DIR_NAME


def list_segments(shm_dir: Path = SHM_DIR) -> dict[str, int]:
    """The `psm_` segments in `shm_dir`: name -> inode."""
    out: dict[str, int] = {}
    try:
        with os.scandir(shm_dir) as it:
            for e in it:
                if e.name.startswith(SEGMENT_PREFIX):
                    try:
                        out[e.name] = e.inode()
                    except OSError:
                        pass
    except OSError:
        pass
    return out


def mapped_segments(pids: Iterable[int], shm_dir: Path = SHM_DIR) -> set[str]:
    """The `psm_` segments in `shm_dir` that any of `pids` has mapped (Linux /proc)."""
    prefix = f"{shm_dir}/{SEGMENT_PREFIX}"
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if prefix in line:
                        path = line.rstrip("\n").split(None, 5)[-1].removesuffix(" (deleted)")
                        if path.startswith(prefix):
                            found.add(path[len(shm_dir.as_posix()) + 1:])
        except OSError:  # gone, or not ours to read
            pass
    return found


def process_start_time(pid: int) -> float | None:
    """The process's start time (psutil `create_time`), None when it is gone or a zombie."""
    import psutil

    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p.create_time()
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:  # e.g. AccessDenied: it exists; treat as alive with unknown start time
        return float("nan")


def _is_alive(pid: int, started: float) -> bool:
    now = process_start_time(pid)
    if now is None:
        return False
    if now != now:  # nan: exists, start time unreadable: alive (never sweep what may be in use)
        return True
    return abs(now - started) <= _START_TIME_SLACK_S  # else the pid was reused: that one is gone


def record_is_live(record: ShmRecord) -> bool:
    """True while any process of the record still runs (same pid and start time)."""
    return any(_is_alive(pid, t) for pid, t in record.processes.items())


def _unlink_if_same(shm_dir: Path, name: str, inode: int) -> bool:
    path = shm_dir / name
    try:
        if os.stat(path, follow_symlinks=False).st_ino != inode:
            return False  # gone and the name reused: not the segment we recorded
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        log.warning("shm sweep: could not unlink %s: %s", path, e)
        return False


def sweep(shm_dir: Path = SHM_DIR, records: Path | None = None) -> SweepReport:
    """Unlinks the segments of every record whose processes are all gone, and removes
    those records. Never raises for a bad record or a failed unlink (warns instead).

    records: the folder of the records; default `records_dir(shm_dir)` (tests pass their own).
    """
    report = SweepReport()
    rdir = records if records is not None else records_dir(shm_dir)
    if rdir is None or not rdir.is_dir():
        return report
    try:
        files = sorted(rdir.iterdir())
    except OSError as e:
        log.warning("shm sweep: cannot list %s: %s", rdir, e)
        return report
    for path in files:
        m = _RECORD_NAME.fullmatch(path.name)
        if m is None:
            continue  # a writer's temporary file, or nothing of ours
        try:
            record = ShmRecord.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("shm sweep: ignoring unreadable record %s: %s", path, e)
            report.bad_records.append(path.name)
            continue
        if record.owner_pid != int(m.group(1)):
            log.warning("shm sweep: ignoring record %s: it names owner pid %d", path, record.owner_pid)
            report.bad_records.append(path.name)
            continue
        if record_is_live(record):
            report.live_records.append(path.name)
            continue
        for name, inode in sorted(record.segments.items()):
            if _unlink_if_same(shm_dir, name, inode):
                report.swept.append(name)
        path.unlink(missing_ok=True)
        report.dead_records.append(path.name)
    if report.swept:
        log.info("shm sweep: unlinked %d shared-memory segment(s) of engines killed without "
                 "shutdown: %s", len(report.swept), " ".join(report.swept))
    return report


class SegmentRecorder:
    """Records the `psm_` segments that the engine processes started below this process
    create, from `start()` on, in `<records dir>/<pid>-<seq>.json`.

    Use: `start()` right before starting the engine, `stop()` right after (or after its
    failure), `release()` once the engine's processes are gone (its clean shutdown).
    `scan()` may be called any time in between to pick up later segments of the same
    engine processes. A no-op where there is no writable `shm_dir`. Not thread-safe
    beyond its own polling thread.
    """

    def __init__(self, shm_dir: Path = SHM_DIR, poll_s: float = 0.5, records: Path | None = None):
        """records: the folder of the records; default `records_dir(shm_dir)`."""
        self.shm_dir = shm_dir
        self.poll_s = poll_s
        self.pid = os.getpid()
        self.record = ShmRecord(self.pid)
        rdir = records if records is not None else records_dir(shm_dir)
        self.path: Path | None = rdir / f"{self.pid}-{next(_seq)}.json" if rdir is not None else None
        self._before: dict[str, int] = {}
        self._known_children: set[int] = set()  # our children before start(): not this engine's
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._written = ""
        self._released = False

    @property
    def segments(self) -> dict[str, int]:
        return dict(self.record.segments)

    def start(self) -> None:
        """Snapshots /dev/shm and the processes below this one, writes the (empty) record,
        and polls in a daemon thread until `stop()`."""
        if self.path is None:
            return
        self._before = list_segments(self.shm_dir)
        self._known_children = {p.pid for p in self._direct_children()}
        started = process_start_time(self.pid)
        self.record.processes[self.pid] = started if started is not None else 0.0
        self._write()
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="shm-recorder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops polling, after one last scan."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.scan()

    def scan(self) -> None:
        """Records the new processes below this one and the new segments they map."""
        if self.path is None:
            return
        with self._lock:
            if self._released:
                return
            for pid in self._engine_processes():
                if pid not in self.record.processes:
                    started = process_start_time(pid)
                    if started is not None:
                        self.record.processes[pid] = started
            engine_pids = [p for p in self.record.processes if p != self.pid]
            if engine_pids:
                now = list_segments(self.shm_dir)
                for name in mapped_segments(engine_pids, self.shm_dir):
                    inode = now.get(name)
                    if inode is not None and self._before.get(name) != inode:
                        self.record.segments[name] = inode
            self._write()

    def release(self) -> list[str]:
        """Unlinks the recorded segments that still exist (the engine's processes must be
        gone: call after its shutdown) and removes the record. Returns those unlinked."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.path is None:
            return []
        with self._lock:
            self._released = True
            gone = [n for n, i in sorted(self.record.segments.items())
                    if _unlink_if_same(self.shm_dir, n, i)]
            self.path.unlink(missing_ok=True)
        if gone:
            log.info("shm: unlinked %d segment(s) vLLM left at shutdown: %s", len(gone), " ".join(gone))
        return gone

    # -- internals ---------------------------------------------------------------
    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.scan()
            except Exception as e:  # noqa: BLE001 - recording is best effort; never break start-up
                log.warning("shm recorder: scan failed: %s", e)

    def _direct_children(self) -> list[Any]:
        import psutil

        try:
            return psutil.Process(self.pid).children()
        except psutil.Error:
            return []

    def _engine_processes(self) -> list[int]:
        """The children this process started since `start()`, and everything below them
        (vLLM: the engine core, its workers). Not the rest of the tree: a Ray driver's
        tree holds its actors' processes (raylet's children), other engines included."""
        import psutil

        found = []
        for child in self._direct_children():
            if child.pid in self._known_children:
                continue
            found.append(child.pid)
            try:
                found.extend(p.pid for p in child.children(recursive=True))
            except psutil.Error:
                pass
        return found

    def _write(self) -> None:
        assert self.path is not None
        text = self.record.to_json()
        if text == self._written:
            return
        try:
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
            self._written = text
        except OSError as e:
            log.warning("shm recorder: cannot write %s: %s", self.path, e)


def start_recording() -> SegmentRecorder:
    """Sweeps the segments of engines killed without shutdown, then starts recording
    this engine's. Best effort: never fails the engine's start."""
    try:
        sweep()
    except Exception as e:  # noqa: BLE001 - a leak is not worth a failed start-up
        log.warning("shm sweep failed: %s", e)
    recorder = SegmentRecorder()
    try:
        recorder.start()
    except Exception as e:  # noqa: BLE001
        log.warning("shm recorder failed to start: %s", e)
    return recorder


def release_after_failed_start(recorder: SegmentRecorder, wait_s: float = 5.0) -> None:
    """After a failed start-up: unlinks the segments it made once its processes are gone;
    if some still run, the record stays for the next engine start's sweep."""
    import psutil

    try:
        recorder.stop()
        procs = []
        for pid in recorder.record.processes:
            if pid != os.getpid():
                try:
                    procs.append(psutil.Process(pid))
                except psutil.Error:
                    pass
        _, alive = psutil.wait_procs(procs, timeout=wait_s)

        def running(p: Any) -> bool:
            try:
                return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False

        if not any(running(p) for p in alive):
            recorder.release()
    except Exception as e:  # noqa: BLE001 - never mask the start-up error
        log.warning("shm: cleanup after failed start-up failed: %s", e)
