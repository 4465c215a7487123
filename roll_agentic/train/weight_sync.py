"""Publishing trainer weights to the rollout engines, versioned.

The trainer writes its state dict once to a safetensors file in shared
memory (/dev/shm when present) and every engine loads that file; on CPU this
is the path vLLM's worker extension reloads from, and the HF engine reads
the same file. Each file holds one version, kept while some engine may still
restore from it: Ray restarts a dead engine actor from the last file it loaded
(engine/host.py), and an engine that failed to load version v still names v-1.
Deleting v-1 regardless left the restarted engine without weights.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import ray
import torch
from safetensors.torch import save_file

from roll_agentic.error_text import error_line

log = logging.getLogger(__name__)


def shared_memory_dir(run_name: str) -> Path:
    """This process's folder for the weights it publishes (RAM where /dev/shm exists).

    Keyed by pid, so two processes never share one; only `WeightPublisher.close()`
    removed it, so a run killed without closing left its last weights in RAM for good
    (a whole state dict per kill). The folders of this run name whose process is gone
    are swept here, when the resumed run (or the next of that name) starts.
    """
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    prefix = f"roll_agentic-{run_name}-"
    for old in base.glob(f"{prefix}*"):
        pid = old.name[len(prefix):]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    d = base / f"{prefix}{os.getpid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not ours to sweep
    return True


# How long a sync waits for the engines to load a version. An engine past it
# (wedged: alive, never answering) is counted failed and keeps its weights; its
# requests carry that older version, so the staleness bound drops what it
# serves. Without a limit one wedged engine held the trainer forever.
LOAD_TIMEOUT_S = 600.0


class WeightPublisher:
    def __init__(self, engines: list, run_name: str, load_timeout_s: float = LOAD_TIMEOUT_S):
        self.engines = engines
        self.load_timeout_s = load_timeout_s
        self.dir = shared_memory_dir(run_name)
        self._files: dict[int, Path] = {}  # version -> its file, while kept
        # Per engine: the version it last loaded for sure, and the newest whose load may
        # still land or have been recorded (no answer in time, or the actor died mid-call).
        # A restarted engine restores one of the two; two per engine bound what stays in RAM.
        self._loaded: list[int | None] = [None] * len(engines)
        self._maybe: list[int | None] = [None] * len(engines)

    def publish(self, version: int, state: dict[str, torch.Tensor]) -> dict[str, float]:
        """Writes, loads on every live engine, and returns timings. Dead engines, and
        engines that do not load it within `load_timeout_s`, are counted failed (each
        logged); when every engine refuses it (an error raised in each), raises: a name
        or shape mismatch refuses it on all, and training on while every sample goes
        stale hid the cause."""
        t0 = time.perf_counter()
        path = self.dir / f"weights_v{version}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(state, str(tmp))
        os.replace(tmp, path)
        self._files[version] = path
        t1 = time.perf_counter()
        refs = [e.load_weights.remote(version, str(path)) for e in self.engines]
        errors: list[str] = []
        refused = 0  # raised in the actor: a name or shape mismatch, a file it cannot open
        deadline = time.monotonic() + self.load_timeout_s
        for i, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
                self._loaded[i], self._maybe[i] = version, None
            except ray.exceptions.RayError as err:  # dead, refused, or no answer in time (GetTimeoutError)
                if isinstance(err, ray.exceptions.RayTaskError):  # raised in the actor: nothing recorded
                    refused += 1
                else:
                    self._maybe[i] = version
                errors.append(f"engine {i}: {_one_line(err)}")
                log.warning("weight sync v%d: %s", version, errors[-1])
        t2 = time.perf_counter()
        keep = {version, *self._loaded, *self._maybe}
        for v in [v for v in self._files if v not in keep]:
            self._files.pop(v).unlink(missing_ok=True)
        # Every engine refused it: the same cause will refuse the next version too. (One that
        # was restarting or gone restores this file when it is back: a run goes on through it.)
        if self.engines and refused == len(self.engines):
            raise RuntimeError(f"weight sync v{version}: every engine refused it; {errors[0]}")
        return {"sync/write_s": t1 - t0, "sync/load_s": t2 - t1, "sync/failed_engines": float(len(errors))}

    def close(self) -> None:
        for p in self.dir.glob("*"):
            p.unlink(missing_ok=True)
        try:
            self.dir.rmdir()
        except OSError:
            pass


def _one_line(err: Exception) -> str:
    """The error's type and message in one line: for an error raised in the actor, its
    cause (Ray's text for it is the whole remote traceback)."""
    cause = getattr(err, "cause", None) if isinstance(err, ray.exceptions.RayTaskError) else None
    return error_line(cause if isinstance(cause, BaseException) else err, limit=500)
