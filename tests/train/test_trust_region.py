import math

import pytest
import torch

from roll_agentic.config import AlgoConfig, Config, ConfigError, TrainerConfig
from roll_agentic.config_check import validate
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.loss import token_logprobs
from roll_agentic.train.trainer import PolicyTrainer, Sample
from roll_agentic.train.trust_region import AdaptiveLR, step_kl_sum


def _batch(seed: int, n: int = 8) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(5, 300, (12,), generator=g).tolist()
        old = [0.0] * 6 + (-torch.rand(6, generator=g) * 6).tolist()
        out.append(Sample(ids, [0] * 6 + [1] * 6, old, advantage=1.0 if i % 2 else -1.0))
    return out


def test_the_k3_estimate_by_hand():
    before = torch.tensor([[0.0, -1.0, -2.0]])
    after = torch.tensor([[5.0, -1.5, -2.0]])  # position 0 is masked out: its change counts for nothing
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    assert step_kl_sum(before, after, mask) == pytest.approx(math.exp(-0.5) - 1.0 + 0.5)
    assert step_kl_sum(before, before, mask) == 0.0


def test_the_rate_shrinks_past_twice_the_target_and_grows_back_under_half():
    lr = AdaptiveLR(target_kl=0.01)
    assert lr.update(0.03) == pytest.approx(1 / 1.5)
    assert lr.update(0.015) == pytest.approx(1 / 1.5)  # inside [target/2, 2 target]: kept
    assert lr.update(0.001) == pytest.approx(1.0)
    assert lr.update(0.001) == 1.0  # never above the schedule's own rate
    for _ in range(50):
        lr.update(1.0)
    assert lr.mult == lr.min_mult
    off = AdaptiveLR(target_kl=0.0)
    assert not off.enabled and off.update(100.0) == 1.0


def test_the_trainer_measures_its_step_and_slows_the_next(tiny_model_path):
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=3, lr_schedule="constant"),
                            AlgoConfig(target_kl=1e-9))
    batch = _batch(0)
    ids = torch.tensor([s.token_ids for s in batch])
    mask = torch.tensor([s.loss_mask for s in batch]).float()
    with torch.no_grad():
        before = token_logprobs(trainer.model(input_ids=ids).logits, ids)
    m = trainer.train_step(batch)
    with torch.no_grad():
        after = token_logprobs(trainer.model(input_ids=ids).logits, ids)
    assert m["train/step_kl"] == pytest.approx(step_kl_sum(before, after, mask) / float(mask.sum()), rel=1e-4)
    assert m["train/step_kl"] > 1e-9 and m["train/lr"] == 1e-2
    assert m["train/lr_mult"] == pytest.approx(1 / 1.5)
    assert trainer.train_step(_batch(1))["train/lr"] == pytest.approx(1e-2 / 1.5)


def test_without_a_target_nothing_is_measured_or_changed(tiny_model_path):
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=3, lr_schedule="constant"),
                            AlgoConfig())
    m = trainer.train_step(_batch(0))
    assert m["train/step_kl"] == 0.0 and m["train/lr_mult"] == 1.0 and not trainer._trained


def test_the_multiplier_resumes_from_the_checkpoint(tiny_model_path, tmp_path):
    def make():
        return PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=3, lr_schedule="constant"),
                             AlgoConfig(target_kl=1e-9))

    straight = make()
    for s in range(3):
        last = straight.train_step(_batch(s))
    first = make()
    for s in range(2):
        first.train_step(_batch(s))
    save_checkpoint(tmp_path, first.step, first.engine_state_dict(), first.state(), {"buffer": {}})
    resumed = make()
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    resumed.load_state(state, weights)
    again = resumed.train_step(_batch(2))
    assert again["train/lr"] == pytest.approx(last["train/lr"]) == pytest.approx(1e-2 / 1.5**2)
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_a_negative_target_is_refused_by_the_config_check():
    cfg = Config()
    cfg.algo.target_kl = -0.1
    with pytest.raises(ConfigError, match="algo.target_kl"):
        validate(cfg)
