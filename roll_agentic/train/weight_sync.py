"""Publishing trainer weights to the rollout engines, versioned.

The trainer writes its state dict once to a safetensors file in shared
memory (/dev/shm when present) and every engine loads that file; on CPU this
is the path vLLM's worker extension reloads from, and the HF engine reads
the same file. Each file holds one version; the previous one is removed once
all engines serve the new one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import ray
import torch
from safetensors.torch import save_file


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
        self._last: Path | None = None

    def publish(self, version: int, state: dict[str, torch.Tensor]) -> dict[str, float]:
        """Writes, loads on every live engine, and returns timings. Dead engines, and
        engines that do not load it within `load_timeout_s`, are counted failed."""
        t0 = time.perf_counter()
        path = self.dir / f"weights_v{version}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file(state, str(tmp))
        os.replace(tmp, path)
        t1 = time.perf_counter()
        refs = [e.load_weights.remote(version, str(path)) for e in self.engines]
        failed = 0
        deadline = time.monotonic() + self.load_timeout_s
        for ref in refs:
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.RayError:  # dead, or no answer in time (GetTimeoutError)
                failed += 1
        t2 = time.perf_counter()
        if self._last is not None and self._last != path:
            self._last.unlink(missing_ok=True)
        self._last = path
        return {"sync/write_s": t1 - t0, "sync/load_s": t2 - t1, "sync/failed_engines": float(failed)}

    def close(self) -> None:
        for p in self.dir.glob("*"):
            p.unlink(missing_ok=True)
        try:
            self.dir.rmdir()
        except OSError:
            pass
