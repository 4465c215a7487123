"""Job state resident in a node's host memory, within a byte budget.

While another job holds the trainer, a job's weights and optimizer state
wait here (RollMux's residency constraint): switching back in is a warm copy
from host memory into the trainer's model object. A job that is not resident
(queued, or evicted) switches in cold, from its checkpoint on disk.

On a GPU node "device" is the GPU and "host" its DRAM. On a CPU machine both
are RAM, so the copies below are made explicit (clone on the way out, copy
on the way in) to keep the warm path an honest memcpy and not an alias, and
the cold path drops the checkpoint's pages from the page cache first, so
that it reads from storage as a cold start would.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


def clone_tree(obj: Any) -> Any:
    """A deep copy in which every tensor is copied (the device <-> host transfer)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone_tree(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(clone_tree(v) for v in obj)
    return obj


def tree_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tree_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tree_bytes(v) for v in obj)
    return 0


@dataclass
class HostState:
    """One job's trainer state in host memory: what a warm switch copies in."""

    weights: dict[str, torch.Tensor]
    trainer_state: dict  # PolicyTrainer.state(): step, optimizer, rng
    nbytes: int = 0

    def __post_init__(self) -> None:
        if not self.nbytes:
            self.nbytes = tree_bytes(self.weights) + tree_bytes(self.trainer_state)


class ResidencyError(RuntimeError):
    pass


@dataclass
class ResidencyStore:
    """Reservations and copies of resident job state on one node.

    A job reserves its bytes when admitted (the placement policy checked the
    budget); the copy itself lands on its first switch-out. Reserving beyond
    the budget raises: the multiplexer must have refused or queued the job.
    """

    budget_bytes: int
    reserved: dict[str, int] = field(default_factory=dict)
    states: dict[str, HostState] = field(default_factory=dict)

    @property
    def used_bytes(self) -> int:
        return sum(self.reserved.values())

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - self.used_bytes

    def reserve(self, job: str, nbytes: int) -> None:
        if nbytes > self.free_bytes + self.reserved.get(job, 0):
            raise ResidencyError(f"job {job}: state of {nbytes} B does not fit the {self.free_bytes} B free "
                                 f"of this node's {self.budget_bytes} B residency budget")
        self.reserved[job] = nbytes

    def is_resident(self, job: str) -> bool:
        return job in self.reserved

    def put(self, job: str, state: HostState) -> None:
        if job not in self.reserved:
            raise ResidencyError(f"job {job} holds no residency reservation")
        if state.nbytes > self.reserved[job]:  # grown (e.g. Adam state appeared): re-reserve
            self.reserve(job, state.nbytes)
        self.states[job] = state

    def get(self, job: str) -> HostState | None:
        return self.states.get(job)

    def evict(self, job: str) -> None:
        self.reserved.pop(job, None)
        self.states.pop(job, None)


def drop_page_cache(path: Path) -> None:
    """Asks the kernel to forget a file's cached pages, so the next read hits storage."""
    if not hasattr(os, "posix_fadvise"):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_cold(ckpt_dir: Path) -> tuple[HostState, float]:
    """The state of a checkpoint read from storage; returns it and the read seconds."""
    from safetensors.torch import load_file

    for name in ("weights.safetensors", "trainer.pt"):
        drop_page_cache(ckpt_dir / name)
    t0 = time.perf_counter()
    weights = load_file(str(ckpt_dir / "weights.safetensors"))
    trainer_state = torch.load(ckpt_dir / "trainer.pt", weights_only=False)
    return HostState(weights, trainer_state), time.perf_counter() - t0
