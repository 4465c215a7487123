"""Warm switches copy in place and change nothing: two jobs sharing a trainer train as if alone."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.mux.residency import DeviceLayout, copy_in, copy_out
from roll_agentic.train.lr_schedule import lr_at
from tests.mux.samples import assert_same_state, random_samples, trainer_state

# Two jobs with their own hyperparameters: a warm switch must restore each one's lr and decay too.
CONFIGS = {"a": TrainerConfig(lr=1e-2, ppo_epochs=2, seed=1), "b": TrainerConfig(lr=3e-3, weight_decay=0.1, seed=2)}
SEEDS = {"a": 0, "b": 100}
# On a GPU the trainer's state is on the device and the resident copies in page-locked host memory.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="needs a CUDA GPU"))]


def _slot(tiny_model_path, tmp_path, jobs, device="cpu"):
    from roll_agentic.mux.trainer_slot import TrainerSlot

    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    for job in jobs:
        slot.register(job, tiny_model_path, replace(CONFIGS[job], device=device), AlgoConfig(alpha=0), 1.0,
                      str(tmp_path / job))
    return slot


def _alone(tiny_model_path, tmp_path, job: str, steps: int, device: str) -> tuple[dict, dict]:
    slot = _slot(tiny_model_path, tmp_path / f"alone-{job}", [job], device)
    slot.switch_in(job)
    for i in range(steps):
        slot.train(job, random_samples(SEEDS[job] + i))
    return trainer_state(slot)


@pytest.mark.parametrize("device", DEVICES)
def test_warm_switches_between_two_jobs_leave_each_bitwise_as_trained_alone(tiny_model_path, tmp_path, device):
    steps = 4
    slot = _slot(tiny_model_path, tmp_path / "shared", ["a", "b"], device)
    for job in ("a", "b"):
        slot.reserve(job, 1 << 28)
    kinds: list[str] = []
    device_ptrs: list[list[int]] = []
    host_ptrs: list[list[int]] = []
    for i in range(steps):
        for job in ("a", "b"):
            kinds.append(slot.switch_in(job).kind)
            slot.train(job, random_samples(SEEDS[job] + i))
            device_ptrs.append([t.data_ptr() for t in slot._layout().tensors])
        host_ptrs.append([t.data_ptr() for t in slot.store.get("a").tensors])
    assert kinds[:2] == ["fresh", "fresh"] and set(kinds[2:]) == {"warm"}
    # In place: past the first rounds no tensor is allocated on either side of a switch.
    assert all(p == device_ptrs[-1] for p in device_ptrs[2:])
    assert all(p == host_ptrs[-1] for p in host_ptrs)
    # The resident copies are in host memory, page-locked where they came from a GPU
    # (AdamW keeps its step counts on the CPU); the trainer's tensors stay on the device.
    host = slot.store.get("a")
    assert all(t.device.type == "cpu" and t.is_pinned() == (device == "cuda") for t in host.tensors)
    for slots, where in zip(host.opt, host.opt_devices, strict=True):
        for k, v in slots.items():
            if isinstance(v, torch.Tensor):
                assert v.device.type == "cpu" and v.is_pinned() == (where[k].type == "cuda"), k
    assert any(w.type == "cuda" for ws in host.opt_devices for w in ws.values()) == (device == "cuda")
    assert all(t.device.type == device for t in slot._layout().tensors)

    shared_b = trainer_state(slot)
    slot.switch_in("a")
    # A job that is not active checkpoints from its host copy (the tied lm_head once).
    from roll_agentic.train.checkpoint import load_checkpoint

    weights, _, _ = load_checkpoint(slot.checkpoint("b", steps, {}, keep=1))
    assert weights.keys() == shared_b[0].keys()
    assert all(torch.equal(weights[k], v) for k, v in shared_b[0].items())
    assert_same_state(trainer_state(slot), _alone(tiny_model_path, tmp_path, "a", steps, device))
    assert_same_state(shared_b, _alone(tiny_model_path, tmp_path, "b", steps, device))
    a = CONFIGS["a"]  # its own rate comes back with it: that of its last step under its schedule
    want_lr = lr_at(steps - 1, a.lr, a.total_steps, a.lr_schedule, a.lr_min_ratio, a.lr_warmup_steps)
    assert slot.trainer.optimizer.param_groups[0]["lr"] == want_lr


def test_copy_in_refuses_another_architecture_so_the_slot_rebuilds():
    small = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(small.parameters(), lr=1e-3)
    small(torch.ones(1, 4)).sum().backward()
    opt.step()
    host = copy_out(DeviceLayout.of(small, opt), step=1, host=None)
    wide = torch.nn.Linear(4, 5)
    assert not copy_in(DeviceLayout.of(wide, torch.optim.AdamW(wide.parameters())), host)

    other = torch.nn.Linear(4, 4)
    other_opt = torch.optim.AdamW(other.parameters(), lr=0.5)
    assert copy_in(DeviceLayout.of(other, other_opt), host)
    assert torch.equal(other.weight, small.weight) and other_opt.param_groups[0]["lr"] == 1e-3
    assert torch.equal(other_opt.state[other.weight]["exp_avg"], opt.state[small.weight]["exp_avg"])
