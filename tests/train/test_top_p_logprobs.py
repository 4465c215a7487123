"""The trainer's logprobs with engine.top_p < 1: the engines report logprobs after
temperature *and* the top-p nucleus, renormalised (hf_engine._sample, vLLM's processed
logprobs). Scored with temperature alone, the PPO ratio was not 1 on the very weights
that sampled, so every on-policy step was biased and clipped for nothing."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.engine.hf_engine import HFEngine, _sample
from roll_agentic.engine.protocol import SamplingParams
from roll_agentic.train.loss import (
    nucleus_mask,
    ppo_clip_loss_sum,
    token_logprobs,
    token_logprobs_and_entropy,
)
from roll_agentic.train.trainer import PolicyTrainer, Sample

PROMPTS = [[3, 17, 42, 99, 7], [5, 8, 13, 21], [100, 200, 30, 40, 50, 60], [9, 9, 9]]
TEMPERATURE, TOP_P = 0.9, 0.8


def _rollouts(model_path: str, n_each: int = 3, max_tokens: int = 16) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt, generated tokens, their engine logprobs) sampled by the hf engine with top_p."""

    async def run():
        engine = HFEngine(model_path, seed=7)
        try:
            sp = SamplingParams(max_tokens=max_tokens, temperature=TEMPERATURE, top_p=TOP_P)
            jobs = [engine.generate(p, sp, f"r{i}-{j}") for i, p in enumerate(PROMPTS) for j in range(n_each)]
            return [(p, r.token_ids, r.logprobs) for p, r in zip([p for p in PROMPTS for _ in range(n_each)],
                                                                 await asyncio.gather(*jobs), strict=True)]
        finally:
            await engine.shutdown()

    return asyncio.run(run())


def _samples(rollouts, advantage=lambda i: 1.0 if i % 2 else -1.0) -> list[Sample]:
    out = []
    for i, (prompt, gen, lps) in enumerate(rollouts):
        out.append(Sample(prompt + gen, [0] * len(prompt) + [1] * len(gen), [0.0] * len(prompt) + list(lps),
                          advantage(i)))
    return out


def test_trainer_logprobs_equal_the_engines_on_the_sampling_weights(tiny_model_path):
    rollouts = _rollouts(tiny_model_path)
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=4), AlgoConfig(),
                            TEMPERATURE, TOP_P)
    worst, temperature_only_worst, n = 0.0, 0.0, 0
    with torch.no_grad():
        for prompt, gen, lps in rollouts:
            ids = torch.tensor([prompt + gen])
            logits = trainer.model(input_ids=ids).logits
            ours = token_logprobs(logits, ids, TEMPERATURE, TOP_P)[0, len(prompt):]
            plain = token_logprobs(logits, ids, TEMPERATURE)[0, len(prompt):]
            engine = torch.tensor(lps)
            assert torch.isfinite(ours).all()
            worst = max(worst, float((ours - engine).abs().max()))
            temperature_only_worst = max(temperature_only_worst, float((plain - engine).abs().max()))
            n += len(gen)
    assert n > 20
    assert worst < 1e-4, f"trainer vs engine logprob, per token: {worst}"
    assert temperature_only_worst > 1e-2  # the test can see the bug: temperature alone differs

    # Through the whole step: the first epoch's ratio is 1 on every token, nothing clipped.
    m = trainer.train_step(_samples(rollouts))
    assert m["train/logprob_diff"] < 1e-4
    assert m["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["train/clip_frac"] == 0.0


def test_job_hands_top_p_to_the_trainer(tiny_model_path):
    from roll_agentic.config import Config
    from roll_agentic.train.job_setup import make_trainer

    cfg = Config()
    cfg.engine.top_p, cfg.engine.temperature = 0.7, 0.8
    trainer = make_trainer(tiny_model_path, cfg)
    assert (trainer.temperature, trainer.top_p) == (0.8, 0.7)


def test_nucleus_mask_mirrors_the_engine_rule_ties_included():
    g = torch.Generator().manual_seed(0)
    rows = [
        torch.zeros(6),  # six tied tokens: the boundary falls inside the tie
        torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
        torch.tensor([0.0, 2.0, 2.0, -1.0, 2.0, -5.0]),
        torch.randn(6, generator=g),
    ]
    for top_p in (0.3, 0.5, 0.8, 0.95):
        for logits in rows:
            lp = torch.log_softmax(logits[None].float() / TEMPERATURE, dim=-1)
            keep = nucleus_mask(lp, top_p)[0]
            many = logits[None].repeat(4000, 1)
            tokens, lps = _sample(many, TEMPERATURE, top_p, torch.Generator().manual_seed(1))
            drawn = set(tokens.tolist())
            assert drawn == set(keep.nonzero().flatten().tolist()), (top_p, logits)
            # ... and the same renormalised logprob for every token drawn
            ids = torch.stack([torch.zeros_like(tokens), tokens], dim=1)  # (N, 2): position 0 predicts token 1
            ours = token_logprobs(torch.stack([many, many], dim=1), ids, TEMPERATURE, top_p)[:, 1]
            assert torch.allclose(ours, lps, atol=1e-6)


def test_top_p_one_is_the_plain_path_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 7, 50, generator=g)
    ids = torch.randint(0, 50, (2, 7), generator=g)
    lp, ent = token_logprobs_and_entropy(logits, ids, 0.7)
    lp1, ent1 = token_logprobs_and_entropy(logits, ids, 0.7, top_p=1.0)
    plain = torch.log_softmax(logits[:, :-1].float() / 0.7, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.equal(lp, lp1) and torch.equal(ent, ent1)
    assert torch.equal(lp[:, 1:], plain)


def test_a_token_outside_the_current_nucleus_keeps_loss_and_grads_finite():
    # Position 0 predicts token 1 whose probability is tiny: outside a 0.5 nucleus.
    logits = torch.tensor([[[5.0, -20.0, 4.0, 0.0], [0.0, 0.0, 0.0, 0.0]]], requires_grad=True)
    ids = torch.tensor([[0, 1]])
    lp, ent = token_logprobs_and_entropy(logits, ids, 1.0, top_p=0.5)
    assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
    # The nucleus {0} widened by the sampled token 1: log p1 / (p0 + p1)
    full = torch.log_softmax(logits[0, 0].detach(), -1)
    assert lp[0, 1].item() == pytest.approx((full[1] - torch.logaddexp(full[0], full[1])).item(), abs=1e-5)
    for adv in (1.0, -1.0):
        logits.grad = None
        lp, ent = token_logprobs_and_entropy(logits, ids, 1.0, top_p=0.5)
        s = ppo_clip_loss_sum(lp, torch.tensor([[0.0, -0.1]]), torch.tensor([adv]), torch.tensor([[0, 1]]), 0.2,
                              ref_logprobs=lp.detach() - 0.5, kl_coef=0.1, entropy=ent, entropy_coef=0.01)
        s.loss.backward()
        assert math.isfinite(s.loss.item()) and math.isfinite(s.ratio)
        assert torch.isfinite(logits.grad).all()
    # A positive advantage pulls the token back in: its logit's gradient says "raise it".
    logits.grad = None
    lp, _ = token_logprobs_and_entropy(logits, ids, 1.0, top_p=0.5)
    ppo_clip_loss_sum(lp, torch.tensor([[0.0, -0.1]]), torch.tensor([1.0]), torch.tensor([[0, 1]]), 0.2).loss.backward()
    assert logits.grad[0, 0, 1] < 0


def test_trainer_step_on_tokens_outside_the_nucleus_stays_finite(tiny_model_path):
    """After an update a sampled token may leave the nucleus: scored as -inf it gave a
    0 ratio and NaN gradients. Here every generated token is the model's least likely."""
    trainer = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=2), AlgoConfig(kl_coef=0.1),
                            TEMPERATURE, 0.5)
    samples = []
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS):
            ids = list(prompt)
            for _ in range(6):
                ids.append(int(trainer.model(input_ids=torch.tensor([ids])).logits[0, -1].argmin()))
            n = len(ids) - len(prompt)
            samples.append(Sample(ids, [0] * len(prompt) + [1] * n, [0.0] * len(prompt) + [-1.0] * n,
                                  1.0 if i % 2 else -1.0))
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    m = trainer.train_step(samples)
    assert all(math.isfinite(v) for v in m.values()), m
    after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    assert torch.isfinite(after).all() and not torch.equal(before, after)
