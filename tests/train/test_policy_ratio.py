"""On the weights that sampled them, the trainer's logprobs are the engine's: the PPO ratio is 1."""

import json
import shutil

import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.loss import token_logprobs
from roll_agentic.train.trainer import PolicyTrainer, Sample


def test_dropout_in_the_checkpoint_does_not_perturb_the_on_policy_ratio(tiny_model_path, tmp_path):
    # Engines score in eval mode (hf_engine: model.eval(); vLLM has no dropout). A trainer
    # in train mode applies a checkpoint's dropout to its logprobs: the ratio on the very
    # weights that sampled the tokens is then noise around 1, clipped at random, and the
    # trust region measures dropout noise as a step KL.
    path = tmp_path / "dropout-model"
    shutil.copytree(tiny_model_path, path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["attention_dropout"] = 0.5
    (path / "config.json").write_text(json.dumps(cfg))

    temperature = 0.8
    trainer = PolicyTrainer(str(path), TrainerConfig(micro_batch_size=8, lr=1e-9), AlgoConfig(entropy_coef=0.0),
                            temperature=temperature)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (3, 12), generator=g)
    reference = PolicyTrainer(str(path), TrainerConfig(), AlgoConfig(), temperature=temperature).model.eval()
    with torch.no_grad():  # the engine's view: eval mode, same weights, same temperature
        engine_lp = token_logprobs(reference(input_ids=ids).logits, ids, temperature)
    mask = [0] * 4 + [1] * 8
    trainer.accumulate([Sample(ids[i].tolist(), mask, engine_lp[i].tolist(), 1.0) for i in range(3)])
    m = trainer.apply()
    assert m["train/logprob_diff"] < 1e-5
    assert m["train/clip_frac"] == 0.0
