"""A resume loads the checkpoint's weights only if they are this model's: the load was not
strict (a tied lm_head is absent from them), so a checkpoint of another model or one missing
tensors loaded what it could and left the rest as initialised, and only an optimizer that
did not fit said anything, about the optimizer."""

from __future__ import annotations

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.trainer import PolicyTrainer, Sample

UP = "model.layers.0.mlp.up_proj.weight"


def _trained_checkpoint(path: str, root) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(5, 300, (10,), generator=g).tolist(), [0] * 5 + [1] * 5,
                      [0.0] * 5 + [-1.0] * 5, 1.0 if i % 2 else -1.0) for i in range(4)]
    first = PolicyTrainer(path, TrainerConfig(lr=1e-2), AlgoConfig())
    first.train_step(samples)
    save_checkpoint(root, first.step, first.engine_state_dict(), first.state(), {"buffer": {}})
    weights, state, _ = load_checkpoint(latest_checkpoint(root))
    return weights, state


def _refused(trainer: PolicyTrainer, state: dict, weights: dict) -> str:
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(ValueError) as err:
        trainer.load_state(state, weights)
    msg = str(err.value)
    assert "\n" not in msg and "do not fit this model" in msg
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # refused before anything was loaded
    assert trainer.step == 0
    return msg


def test_the_runs_own_checkpoint_loads_with_its_tied_head_absent(tiny_model_path, tmp_path):
    weights, state = _trained_checkpoint(tiny_model_path, tmp_path)
    assert "lm_head.weight" not in weights  # tied: the engines' state leaves it out
    resumed = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2), AlgoConfig())
    resumed.load_state(state, weights)
    assert resumed.step == 1
    assert torch.equal(resumed.model.state_dict()[UP], weights[UP])


def test_a_checkpoint_missing_a_tensor_is_refused_naming_it(tiny_model_path, tmp_path):
    weights, state = _trained_checkpoint(tiny_model_path, tmp_path)
    del weights[UP]
    msg = _refused(PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig()), state, weights)
    assert f"missing 1 ({UP})" in msg and "unexpected" not in msg


def test_another_models_checkpoint_is_refused_naming_the_keys(tiny_model_path, tmp_path):
    weights, state = _trained_checkpoint(tiny_model_path, tmp_path)
    # The same shapes under other names (another architecture's naming): nothing of it loaded.
    other = {k.replace("model.", "transformer.", 1): v for k, v in weights.items()}
    msg = _refused(PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig()), state, other)
    assert "missing" in msg and "unexpected" in msg and "transformer.embed_tokens.weight" in msg
    assert "model.embed_tokens.weight" in msg and "more)" in msg  # a few named, the count of the rest


def test_other_shapes_are_refused_in_one_line(tiny_model_path, tmp_path):
    weights, state = _trained_checkpoint(tiny_model_path, tmp_path)
    weights[UP] = weights[UP][:-1]
    msg = _refused(PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig()), state, weights)
    assert f"other shapes for 1 ({UP}" in msg


def test_an_untied_head_may_not_be_absent(tiny_model_path, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_path)
    config.tie_word_embeddings = False
    untied = tmp_path / "untied"
    AutoModelForCausalLM.from_config(config).save_pretrained(untied)
    trainer = PolicyTrainer(str(untied), TrainerConfig(), AlgoConfig())
    weights = trainer.engine_state_dict()
    assert "lm_head.weight" in weights
    del weights["lm_head.weight"]
    state = {**trainer.state(), "step": 3}
    msg = _refused(trainer, state, weights)
    assert "missing 1 (lm_head.weight)" in msg
