"""A NaN/inf gradient norm skips the optimizer step (weights and Adam moments untouched), is
reported as `train/skipped_nonfinite`, and a run of such steps stops the run in one line."""

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.trainer import NONFINITE_LIMIT, PolicyTrainer
from tests.train.batches import random_batch


def _trainer(path: str, **algo) -> PolicyTrainer:
    return PolicyTrainer(path, TrainerConfig(lr=1e-2, micro_batch_size=2), AlgoConfig(**algo))


def _poisoned_apply(trainer: PolicyTrainer, seed: int, value: float = float("nan")) -> dict[str, float]:
    trainer.accumulate(random_batch(seed, 4))  # micro-batches of 2: every backward has run
    p = next(p for p in trainer.trainable() if p.grad is not None and p.grad.dim() == 2)
    p.grad[0, 0] = value
    return trainer.apply()


def _snapshot(trainer: PolicyTrainer):
    params = [p.detach().clone() for p in trainer.trainable()]
    moments = {i: {k: v.clone() for k, v in s.items()} for i, s in enumerate(trainer.optimizer.state.values())}
    return params, moments


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_nonfinite_gradient_skips_the_step(tiny_model_path, value):
    trainer = _trainer(tiny_model_path, target_kl=0.01)
    first = trainer.train_step(random_batch(0, 4))  # a real step first: Adam has moments
    assert first["train/skipped_nonfinite"] == 0.0
    params, moments = _snapshot(trainer)
    mult = trainer.trust.mult
    m = _poisoned_apply(trainer, 1, value)
    assert m["train/skipped_nonfinite"] == 1.0
    assert m["train/step_kl"] == 0.0 and trainer.trust.mult == mult
    for before, p in zip(params, trainer.trainable(), strict=True):
        assert torch.isfinite(p).all()
        assert torch.equal(before, p)
        assert p.grad is None  # the poisoned gradient does not leak into the next step
    after = {i: s for i, s in enumerate(trainer.optimizer.state.values())}
    for i, s in moments.items():
        for k, v in s.items():
            assert torch.isfinite(after[i][k]).all()
            assert torch.equal(v, after[i][k]), k
    # the next healthy step trains as usual
    m = trainer.train_step(random_batch(2, 4))
    assert m["train/skipped_nonfinite"] == 0.0
    assert any(not torch.equal(b, p) for b, p in zip(params, trainer.trainable(), strict=True))
    assert all(torch.isfinite(p).all() for p in trainer.trainable())


def test_nonfinite_steps_in_a_row_stop_the_run(tiny_model_path):
    trainer = _trainer(tiny_model_path)
    for i in range(NONFINITE_LIMIT - 1):
        assert _poisoned_apply(trainer, i)["train/skipped_nonfinite"] == 1.0
    trainer.train_step(random_batch(9, 4))  # a finite step in between starts the count again
    for i in range(NONFINITE_LIMIT - 1):
        assert _poisoned_apply(trainer, i)["train/skipped_nonfinite"] == 1.0
    with pytest.raises(RuntimeError, match=r"trainer\.lr.*trainer\.max_grad_norm"):
        _poisoned_apply(trainer, 5)
    assert all(torch.isfinite(p).all() for p in trainer.trainable())
