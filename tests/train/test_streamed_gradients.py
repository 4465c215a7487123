"""RollPacker's stream trainer: gradients of groups accumulated as they finish, one optimizer
step at the round's end, must be the update of the whole round's batch given at once."""

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.rollout.trajectory import Trajectory
from roll_agentic.train.trainer import PolicyTrainer, samples_from_groups


def _groups(seed: int, n_groups: int = 5, size: int = 4) -> list[list[Trajectory]]:
    """Groups of trajectories of 7-15 tokens (a 4-token prompt), rewards 0/1, own logprobs."""
    g = torch.Generator().manual_seed(seed)
    groups = []
    for gi in range(n_groups):
        group = []
        for i in range(size):
            length = 7 + (3 * gi + 5 * i) % 9
            ids = torch.randint(5, 300, (length,), generator=g).tolist()
            mask = [0] * 4 + [1] * (length - 4)
            old = [0.0] * 4 + (-torch.rand(length - 4, generator=g) * 6).tolist()
            group.append(Trajectory(f"g{gi}-{i}", f"g{gi}", "a", gi, 0, token_ids=ids, loss_mask=mask,
                                    logprobs=old, reward=float((gi + i) % 2 if i < size - 1 else 1)))
        groups.append(group)
    return groups


def _worst(a: PolicyTrainer, b: PolicyTrainer) -> float:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return max((sa[k] - sb[k]).abs().max().item() for k in sa)


@pytest.mark.parametrize("options", [
    {},
    # the sequence mean divides by the round's trajectory count, known only at its end
    {"loss_agg": "seq_mean_token_mean", "clip_eps_high": 0.28, "dual_clip": 3.0},
])
def test_a_streamed_round_takes_the_step_of_its_whole_batch(tiny_model_path, options):
    # micro-batches of 3 over groups of 4: every streamed part ends in a partial
    # micro-batch, and the last one of the round is partial too (20 samples)
    cfg = TrainerConfig(lr=1e-2, micro_batch_size=3, max_grad_norm=1e9)
    algo = AlgoConfig(entropy_coef=0.01, **options)
    groups = _groups(0)
    plain = PolicyTrainer(tiny_model_path, cfg, algo)
    whole = plain.train_step(samples_from_groups(groups))
    streamed = PolicyTrainer(tiny_model_path, cfg, algo)
    for part in ([groups[0]], groups[1:3], groups[3:]):  # as TrainingJob.stream_phase hands them over
        streamed.accumulate(samples_from_groups(part))
    m = streamed.apply()
    streamed.step += 1
    assert m["train/tokens"] == whole["train/tokens"] == sum(sum(t.loss_mask) for g in groups for t in g)
    assert m["train/samples"] == whole["train/samples"] == 20
    for k in ("train/loss", "train/policy_loss", "train/entropy", "train/grad_norm", "train/lr"):
        assert abs(m[k] - whole[k]) <= 1e-5 * max(1.0, abs(whole[k])), k
    moved = max((p - q).abs().max().item() for p, q in zip(
        plain.model.state_dict().values(), PolicyTrainer(tiny_model_path, cfg, algo).model.state_dict().values(),
        strict=True))
    assert moved > 1e-4  # the step did move the weights
    assert _worst(plain, streamed) <= 1e-6


def test_token_mean_is_over_the_round_not_per_micro_batch(tiny_model_path):
    """One long sample and many short ones: a mean per micro-batch (or per streamed part)
    would weigh the short samples' tokens far more; the sum over the round divided once
    by its token count does not."""
    cfg = TrainerConfig(lr=1e-2, micro_batch_size=2, max_grad_norm=1e9)
    groups = _groups(3, n_groups=3, size=3)
    long = groups[0][0]
    long.token_ids = long.token_ids * 6
    long.loss_mask = long.loss_mask * 6
    long.logprobs = long.logprobs * 6
    streamed = PolicyTrainer(tiny_model_path, cfg, AlgoConfig())
    for g in groups:
        streamed.accumulate(samples_from_groups([g]))
    streamed._backward(streamed._pending)  # the last, partial micro-batch (apply() would run it)
    streamed._pending = []
    grads_streamed = [p.grad.clone() if p.grad is not None else None for p in streamed.model.parameters()]
    total = sum(sum(t.loss_mask) for g in groups for t in g)
    one = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=100, max_grad_norm=1e9),
                        AlgoConfig())
    one.accumulate(samples_from_groups(groups))
    one._backward(one._pending)  # the whole round as one micro-batch
    scale = max(p.grad.abs().max().item() for p in one.model.parameters() if p.grad is not None)
    for p, q in zip(grads_streamed, one.model.parameters(), strict=True):
        if p is not None:
            assert (p / total - q.grad / total).abs().max().item() <= 1e-5 * scale / total
    assert streamed.apply()["train/tokens"] == total
