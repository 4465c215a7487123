"""Job state resident in a node's host memory, within a byte budget.

While another job holds the trainer, a job's weights and optimizer state
wait here (RollMux's residency constraint): switching back in is a warm copy
from host memory into the trainer's model object. A job that is not resident
(queued, or evicted) switches in cold, from its checkpoint on disk.

On a GPU node "device" is the GPU and "host" its DRAM: host buffers are
page-locked CPU tensors, so a switch is one DMA each way and the GPU holds
only the active job. On a CPU machine both are RAM, so the copies are made
explicit to keep the warm path an honest memcpy and not an alias: a job's
host buffers are allocated once, laid out like the device's tensors, and
each switch copies between the two sets in place (copy_out / copy_in).
The cold path drops the checkpoint's pages from the page cache first, so
that it reads from storage as a cold start would, then deserialises and
loads the state into a rebuilt optimizer.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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


def host_like(t: torch.Tensor) -> torch.Tensor:
    """An empty CPU tensor shaped like `t`; page-locked when `t` is on a GPU (DMA-able)."""
    return torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=t.device.type == "cuda")


def tree_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tree_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tree_bytes(v) for v in obj)
    return 0


def _rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(rng: dict) -> None:
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])


@dataclass
class DeviceLayout:
    """Where a trainer's state lives on its device, listed once per model object.

    `tensors` are the parameters then the persistent buffers, in a fixed order;
    `names` maps each state_dict key (engine layout) to its index there (a tied
    lm_head points at the embedding's index). `shapes` decides whether a host
    copy made from another model object fits this one (same architecture).

    `trained_only` (a LoRA trainer): only the optimizer's parameters, named as
    the model names them. The frozen base is left on the device: every LoRA job
    of that base and adapter shape finds it there unchanged, so a switch copies
    adapters and their moments, not the model (the slot rebuilds the trainer
    when a job of another base or form comes in).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    tensors: list[torch.Tensor]
    names: dict[str, int]
    shapes: tuple[tuple[tuple[int, ...], torch.dtype], ...]
    group_sizes: tuple[int, ...]
    trained_only: bool = False

    @classmethod
    def of(cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
           trained_only: bool = False) -> DeviceLayout:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        index = {id(p): i for i, p in enumerate(params)}
        tensors: list[torch.Tensor] = [p.detach() for p in params]
        names: dict[str, int] = {}
        if trained_only:
            names = {k: index[id(p)] for k, p in model.named_parameters() if id(p) in index}
        else:
            for k, v in model.state_dict(keep_vars=True).items():
                if id(v) not in index:  # a persistent buffer
                    index[id(v)] = len(tensors)
                    tensors.append(v.detach())
                names[k] = index[id(v)]
        shapes = tuple((tuple(t.shape), t.dtype) for t in tensors)
        return cls(model, optimizer, params, tensors, names, shapes,
                   tuple(len(g["params"]) for g in optimizer.param_groups), trained_only)


@dataclass
class HostState:
    """One job's trainer state in host memory, laid out like the device's.

    Preallocated on the job's first switch-out; every later switch-out copies
    the device tensors into these same buffers and a warm switch-in copies
    them back into the device's already-allocated tensors (RollMux's warm
    start: host DRAM -> device, no allocation, no deserialisation).
    `tensors` follow `DeviceLayout.tensors`; `opt` holds each parameter's
    optimizer state (AdamW: step, exp_avg, exp_avg_sq; {} before its first
    step), and `opt_devices` where each of its tensors lives on the trainer
    (AdamW keeps `step` on the CPU beside GPU moments); `groups` the param
    groups' hyperparameters (the job's lr, decay). Every tensor here is on
    the CPU.
    """

    tensors: list[torch.Tensor]
    names: dict[str, int]
    shapes: tuple
    opt: list[dict[str, Any]]
    groups: list[dict[str, Any]]
    group_sizes: tuple[int, ...]
    step: int = 0
    rng: dict = field(default_factory=dict)
    opt_devices: list[dict[str, torch.device]] = field(default_factory=list)
    trained_only: bool = False  # a LoRA job's: `weights` are its trained tensors, not the model

    @property
    def nbytes(self) -> int:
        return tree_bytes(self.tensors) + tree_bytes(self.opt)

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """The engine-layout weights (state_dict keys), viewing the host buffers; a LoRA
        job's trained tensors by parameter name (`lora.adapter_state`'s layout) if `trained_only`.

        A tied tensor appears once, under its first name: as in
        `PolicyTrainer.engine_state_dict`, a tied lm_head is left out (and a
        checkpoint cannot hold two names for one buffer)."""
        out, seen = {}, set()
        for k, i in self.names.items():
            if i not in seen:
                seen.add(i)
                out[k] = self.tensors[i]
        return out

    def trainer_state(self) -> dict:
        """`PolicyTrainer.state()`'s layout (what checkpoints hold), viewing the host buffers."""
        state = {i: dict(s) for i, s in enumerate(self.opt) if s}
        groups, first = [], 0
        for g, n in zip(self.groups, self.group_sizes, strict=True):
            groups.append({**g, "params": list(range(first, first + n))})
            first += n
        return {"step": self.step, "optimizer": {"state": state, "param_groups": groups}, "rng": self.rng}

    def fits(self, layout: DeviceLayout) -> bool:
        return (self.shapes == layout.shapes and self.group_sizes == layout.group_sizes
                and self.trained_only == layout.trained_only)

    @classmethod
    def allocate(cls, layout: DeviceLayout) -> HostState:
        return cls([host_like(t) for t in layout.tensors], dict(layout.names), layout.shapes,
                   [{} for _ in layout.params], [], layout.group_sizes,
                   opt_devices=[{} for _ in layout.params], trained_only=layout.trained_only)


def _pair_slots(dst: dict[str, Any], src: dict[str, Any], dsts: list, srcs: list) -> bool:
    """Lists the tensor pairs that copy `src`'s optimizer slots into `dst`'s (non-tensors are set).

    False when the two differ in keys, shapes or dtypes: `dst` cannot be filled in place.
    """
    if not dst or dst.keys() != src.keys():
        return False
    pairs = []
    for k, v in src.items():
        w = dst[k]
        if isinstance(v, torch.Tensor):
            if not isinstance(w, torch.Tensor) or w.shape != v.shape or w.dtype != v.dtype:
                return False
            pairs.append((w, v))
    for k, v in src.items():
        if not isinstance(v, torch.Tensor):
            dst[k] = v
    for w, v in pairs:
        dsts.append(w)
        srcs.append(v)
    return True


def _slots_to_host(src: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.device]]:
    """A host copy of one parameter's optimizer slots, and the device each tensor came from."""
    host, devices = {}, {}
    for k, v in src.items():
        if isinstance(v, torch.Tensor):
            host[k], devices[k] = host_like(v).copy_(v), v.device
        else:
            host[k] = v
    return host, devices


def _slots_to_device(src: dict[str, Any], devices: dict[str, torch.device]) -> dict[str, Any]:
    return {k: v.to(devices.get(k, "cpu"), copy=True) if isinstance(v, torch.Tensor) else v
            for k, v in src.items()}


@torch.no_grad()
def copy_out(layout: DeviceLayout, step: int, host: HostState | None) -> HostState:
    """Device -> host: into the job's preallocated buffers (allocated here the first time only).

    All tensors go in one batched copy (`_foreach_copy_`): the per-tensor Python
    overhead, not the bytes, dominates a small model's switch.
    """
    if host is None or not host.fits(layout):
        host = HostState.allocate(layout)
    dsts, srcs = list(host.tensors), list(layout.tensors)
    state = layout.optimizer.state
    for i, p in enumerate(layout.params):
        st = state.get(p)
        if not st:
            host.opt[i] = {}
        elif not _pair_slots(host.opt[i], st, dsts, srcs):
            host.opt[i], host.opt_devices[i] = _slots_to_host(st)  # a job's first step: allocated now
    torch._foreach_copy_(dsts, srcs)
    host.groups = [{k: v for k, v in g.items() if k != "params"} for g in layout.optimizer.param_groups]
    host.step, host.rng = step, _rng_state()
    return host


@torch.no_grad()
def copy_in(layout: DeviceLayout, host: HostState) -> bool:
    """Host -> device, into the tensors the device already holds; False if the layouts differ.

    The optimizer's per-parameter state is filled in place where the device has
    it already (the previous job's moments, same shapes); only a device that has
    never stepped gets new tensors.
    """
    if not host.fits(layout):
        return False
    opt = layout.optimizer
    if [set(g) - {"params"} for g in opt.param_groups] != [set(g) for g in host.groups]:
        return False  # another optimizer type: the caller rebuilds
    dsts, srcs = list(layout.tensors), list(host.tensors)
    state = opt.state
    for p, hs, where in zip(layout.params, host.opt, host.opt_devices, strict=True):
        if not hs:
            state.pop(p, None)
        elif not _pair_slots(state.get(p) or {}, hs, dsts, srcs):
            state[p] = _slots_to_device(hs, where)
    torch._foreach_copy_(dsts, srcs)
    for g, hg in zip(opt.param_groups, host.groups, strict=True):
        g.update(hg)
    _set_rng_state(host.rng)
    return True


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


def read_cold(ckpt_dir: Path) -> tuple[dict[str, torch.Tensor], dict, float]:
    """A checkpoint read from storage: (engine weights, trainer state, read seconds)."""
    from safetensors.torch import load_file

    for name in ("weights.safetensors", "trainer.pt"):
        drop_page_cache(ckpt_dir / name)
    t0 = time.perf_counter()
    weights = load_file(str(ckpt_dir / "weights.safetensors"))
    trainer_state = torch.load(ckpt_dir / "trainer.pt", weights_only=False, map_location="cpu")
    return weights, trainer_state, time.perf_counter() - t0
