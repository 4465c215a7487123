"""A trainer slot counts a job's resident bytes from the live tensors, without copying them.

`TrainerSlot.state_bytes` used to call `tree_bytes(trainer.state())`, and `state()` builds a
CPU copy of the optimizer state: on a GPU trainer, twice the trained weights moved to host
memory only to be counted.
"""

from __future__ import annotations

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.mux.residency import tree_bytes
from roll_agentic.mux.trainer_slot import TrainerSlot, trainer_state_bytes
from roll_agentic.train.trainer import PolicyTrainer


def _stepped(tr: PolicyTrainer) -> PolicyTrainer:
    """One optimizer step on zero gradients: AdamW's moments and step counts exist after it."""
    for p in tr.model.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    tr.optimizer.step()
    tr.optimizer.zero_grad(set_to_none=True)
    return tr


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_count_is_the_bytes_state_would_hold(tiny_model_path, lora_rank):
    tr = _stepped(PolicyTrainer(tiny_model_path, TrainerConfig(lora_rank=lora_rank), AlgoConfig(alpha=0), 1.0))
    assert tr.optimizer.state  # the moments the count is mostly made of
    assert trainer_state_bytes(tr) == tree_bytes(tr.state())


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_state_bytes_copies_no_state(tiny_model_path, tmp_path, monkeypatch, lora_rank):
    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    slot.register("a", tiny_model_path, TrainerConfig(lora_rank=lora_rank), AlgoConfig(alpha=0), 1.0,
                  str(tmp_path / "a"))
    slot.switch_in("a")
    tr = _stepped(slot.trainer)
    expected_state = tree_bytes(tr.state())

    def no_copy() -> dict:
        raise AssertionError("state() copies the optimizer state: it must not be called to count bytes")

    monkeypatch.setattr(tr, "state", no_copy)
    total, weights = slot.state_bytes("a")
    if lora_rank:
        frozen = sum(p.numel() * p.element_size() for p in tr.model.parameters() if not p.requires_grad)
        whole = tree_bytes(getattr(tr.model, "_lora_whole_initial", {}))
        assert total == 2 * expected_state + frozen + whole
    else:
        assert total == weights + expected_state
