"""A checkpoint's optimizer state is saved on CPU and loaded onto CPU (map_location), whatever
device trained it: a GPU run's checkpoint then loads on another machine, and the optimizer
moves each tensor onto its parameter's device as it loads."""

from __future__ import annotations

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train import checkpoint
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.fsdp import _on_cpu
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import random_batch


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def test_the_optimizer_state_is_on_cpu_and_not_copied_there(tiny_model_path):
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2), AlgoConfig())
    trainer.train_step(random_batch(0, 4))
    saved = trainer.state()["optimizer"]
    tensors = list(_tensors(saved["state"]))
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    live = {t.data_ptr() for s in trainer.optimizer.state.values() for t in _tensors(s)}
    assert {t.data_ptr() for t in tensors} <= live  # a CPU run pays no copy
    assert saved["param_groups"] == trainer.optimizer.state_dict()["param_groups"]


def test_on_cpu_keeps_structure_and_cpu_tensors():
    a = torch.ones(2)
    out = _on_cpu({"x": a, "y": [a, (a, 3)], "z": "s"})
    assert out["x"] is a and out["y"][0] is a and out["y"][1][0] is a and out["y"][1][1] == 3 and out["z"] == "s"
    assert isinstance(out["y"][1], tuple)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_tensors_come_to_cpu():
    a = torch.ones(2, device="cuda")
    out = _on_cpu({"x": a, "y": [a]})
    assert out["x"].device.type == "cpu" and out["y"][0].device.type == "cpu"
    assert torch.equal(out["x"], a.cpu())


def test_a_checkpoint_loads_its_trainer_state_onto_cpu(tiny_model_path, tmp_path, monkeypatch):
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2), AlgoConfig())
    trainer.train_step(random_batch(0, 4))
    save_checkpoint(tmp_path, trainer.step, trainer.engine_state_dict(), trainer.state(), {"buffer": {}})
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "load", spy)
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    assert calls and all(c.get("map_location") == "cpu" for c in calls)
    assert all(t.device.type == "cpu" for t in _tensors(state["optimizer"]["state"]))
    resumed = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2), AlgoConfig())
    resumed.load_state(state, weights)
    assert resumed.step == trainer.step
