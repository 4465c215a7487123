"""Atomic checkpoints: a step is either completely on disk or not there at all.

Layout: <run>/checkpoints/step_000012/{weights.safetensors, trainer.pt, run.json}.
A checkpoint is written into `step_000012.tmp-<pid>` and renamed into place
only when every file is flushed; `latest` names the newest complete one and is
itself replaced atomically. A loader only ever sees renamed directories, so a
process killed mid-write leaves a stray .tmp directory that is ignored and
swept, never a half-written checkpoint that gets loaded. A complete step newer
than `latest` (killed between the rename and the pointer) is the one loaded,
and a save drops complete steps after its own (a history the run went back from).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from roll_agentic import faults

COMPLETE = "run.json"  # written last inside the temp dir


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: bytes) -> None:
    """Replaces `path` with `data` whole or not at all: written to a temp file in the same folder,
    synced, then renamed over it. A kill or a full disk leaves the old file as it was (never an
    empty or half-written one) and no temp file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # the rename itself, or a power loss may undo it



def _recover_set_aside(root: Path) -> None:
    """A step saved again sets its first copy aside (`.tmp-old-<pid>`) and renames the new one
    in: a kill between those two renames left the step only in folders a loader ignores and a
    prune sweeps (with keep=1, no checkpoint at all). The set-aside copy is whole: put back."""
    for old in sorted(root.glob("step_*.tmp-old-*")):
        final, pid = old.name.split(".tmp-old-", 1)
        if _saving(pid):  # between its two renames right now, not killed there
            continue
        whole = all((old / name).exists() for name in (COMPLETE, "weights.safetensors", "trainer.pt"))
        if not (root / final).exists() and whole:
            os.replace(old, root / final)


def _saving(pid: str) -> bool:
    """Is process `pid` (another than this one) alive, and so perhaps mid-save?"""
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def checkpoint_name(step: int) -> str:
    """The folder of step `step`'s checkpoint, under the checkpoints root."""
    return f"step_{step:06d}"


def save_checkpoint(ckpt_root: str | Path, step: int, weights: dict[str, torch.Tensor],
                    trainer_state: dict, run_state: dict[str, Any], keep: int = 2) -> Path:
    root = Path(ckpt_root)
    root.mkdir(parents=True, exist_ok=True)
    _recover_set_aside(root)  # before its sweep, which would delete the only whole copy
    final = root / checkpoint_name(step)
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file(weights, str(tmp / "weights.safetensors"))
    faults.checkpoint_stage("weights")
    torch.save(trainer_state, tmp / "trainer.pt")
    faults.checkpoint_stage("trainer")
    with open(tmp / COMPLETE, "w") as f:
        json.dump({"step": step, **run_state}, f)
        f.flush()
        os.fsync(f.fileno())
    for name in ("weights.safetensors", "trainer.pt"):
        with open(tmp / name, "rb") as f:
            os.fsync(f.fileno())
    _fsync_dir(tmp)  # its entries, before the rename makes it a complete step
    faults.checkpoint_stage("before_rename")
    old = None
    if final.exists():  # the same step saved again (a resumed run): set the old one aside whole
        old = root / f"{final.name}.tmp-old-{os.getpid()}"
        os.replace(final, old)  # an rmtree killed midway would leave a loadable half of it
    os.replace(tmp, final)
    _fsync_dir(root)
    faults.checkpoint_stage("before_latest")
    write_atomic(root / "latest", final.name.encode())
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    faults.checkpoint_stage("before_prune")
    _prune(root, keep, step)
    return final


def _step_of(p: Path) -> int:
    return int(p.name.rsplit("_", 1)[-1])


def _complete_steps(root: Path) -> list[Path]:
    """Complete checkpoints, oldest step first (by number: names past step 999999 grow longer)."""
    return sorted((p for p in root.glob("step_*") if p.is_dir() and ".tmp" not in p.name
                   and p.name.removeprefix("step_").isdigit() and (p / COMPLETE).exists()), key=_step_of)


def _prune(root: Path, keep: int, saved: int) -> None:
    steps = _complete_steps(root)
    # Steps after the one just saved belong to a history the run went back from: kept, the
    # prune took them for the newest and deleted the checkpoint just written (keep=1), and a
    # resume then loaded them on top of the steps redone since.
    doomed_steps = [p for p in steps if _step_of(p) > saved]
    doomed_steps += [p for p in steps if _step_of(p) <= saved][:-keep]
    for old in doomed_steps:
        # renamed first: a kill during the rmtree leaves an ignored .tmp dir, never a
        # step_N that still has run.json but lost its weights
        doomed = root / f"{old.name}.tmp-del-{os.getpid()}"
        os.replace(old, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    for stray in root.glob("step_*.tmp-*"):
        shutil.rmtree(stray, ignore_errors=True)


def latest_checkpoint(ckpt_root: str | Path) -> Path | None:
    """The newest complete checkpoint, or None. Ignores unfinished temp dirs."""
    root = Path(ckpt_root)
    if not root.exists():
        return None
    _recover_set_aside(root)
    steps = _complete_steps(root)
    newest = steps[-1] if steps else None
    pointer = root / "latest"
    if pointer.exists():
        candidate = root / pointer.read_text().strip()
        # A kill between a checkpoint's rename and the pointer's update leaves `latest` naming
        # the one before: the renamed one is complete (written and synced first) and newer.
        if (candidate / COMPLETE).exists() and candidate.name.removeprefix("step_").isdigit() and (
                newest is None or _step_of(candidate) >= _step_of(newest)):
            return candidate
    return newest


def is_latest(ckpt_root: str | Path, step: int) -> bool:
    """Whether the newest complete checkpoint under `ckpt_root` is step `step`'s."""
    last = latest_checkpoint(ckpt_root)
    return last is not None and last.name == checkpoint_name(step)


def load_run_state(path: str | Path) -> dict:
    """A checkpoint's run state alone (buffer, counters), without its tensors."""
    return json.loads((Path(path) / COMPLETE).read_text())


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict, dict]:
    p = Path(path)
    weights = load_file(str(p / "weights.safetensors"))
    # On CPU whatever device saved it: a GPU run's state loads on another machine (or none),
    # and the optimizer moves each tensor onto its parameter's device as it loads it.
    trainer_state = torch.load(p / "trainer.pt", weights_only=False, map_location="cpu")
    return weights, trainer_state, load_run_state(p)
