"""Every entry of trainer.lora_targets must name a linear layer: a typo in one of them was dropped
without a word while the others were wrapped."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from roll_agentic.train.lora import LoraLinear, apply_lora


@pytest.fixture
def model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, torch_dtype=torch.float32)


def test_one_typo_among_right_names_is_refused_naming_it_and_the_layers(model):
    with pytest.raises(ValueError) as err:
        apply_lora(model, rank=4, alpha=8.0, targets=["q_proj", "v_prj"])
    msg = str(err.value)
    assert "trainer.lora_targets ['v_prj'] name no linear layer of the model" in msg
    assert "'q_proj'" in msg and "'o_proj'" in msg  # the layers there are
    assert "did you mean 'v_proj'?" in msg
    assert not any(isinstance(m, LoraLinear) for m in model.modules())  # nothing half-wrapped
    assert all(p.requires_grad for p in model.parameters())  # nor frozen


def test_a_module_that_is_no_linear_layer_is_refused(model):
    with pytest.raises(ValueError, match=r"\['embed_tokens'\] name no linear layer"):
        apply_lora(model, rank=4, alpha=8.0, targets=["q_proj", "embed_tokens"])


def test_all_wrong_still_says_none(model):
    with pytest.raises(ValueError, match=r"name none of the model's linear layers; .*'q_proj'"):
        apply_lora(model, rank=4, alpha=8.0, targets=["qkv", "dense"])


def test_right_names_are_all_wrapped(model):
    n = apply_lora(model, rank=4, alpha=8.0, targets=["q_proj", "v_proj"])
    assert n == 2 * model.config.num_hidden_layers


def test_the_default_list_takes_the_projections_a_model_has(model):
    from roll_agentic.train.lora import ALL_PROJECTIONS

    model.model.layers[0].mlp.gate_up = model.model.layers[0].mlp.gate_proj  # as a fused model names it
    for layer in model.model.layers:
        del layer.mlp.gate_proj
    n = apply_lora(model, rank=4, alpha=8.0, targets=list(ALL_PROJECTIONS))
    assert n == 6 * model.config.num_hidden_layers
