"""A trust region for updates on fresh samples: the learning rate follows each step's KL.

PPO bounds a step by clipping the probability ratio against the sampling
policy. On samples the current weights just generated (alpha = 0, tail
batching) that ratio is 1 for the one optimizer step there is, so the clip
never acts and nothing bounds how far a step moves the policy. Async runs
clip 5-26 % of tokens (their samples are a version old); synchronous runs
clip none, and on FrozenLake about a quarter of them collapsed onto one move
while its reply format was being learned, before any episode had reached
the goal (GRPO's dead zone; README).

With `algo.target_kl` > 0 the trainer measures, after each optimizer step,
the KL divergence from the policy before the step to the policy after it, on
the very tokens it trained on:
    KL ~ mean over generated tokens of  exp(d) - 1 - d,  d = logp_after - logp_before
(the k3 estimator, Schulman 2020: unbiased and >= 0 for samples of the
"before" policy). Then, as PPO implementations with an adaptive learning
rate do (e.g. rl_games' `adaptive` schedule, after Schulman et al. 2017,
section 4's adaptive KL penalty), the rate of the following steps shrinks by
`factor` when the step overshot 2 x target and grows back by `factor`, up to
the schedule's own rate, when it stayed under target / 2.

The multiplier is part of the trainer's state (checkpointed), and with
data-parallel workers the KL is summed over all of them before anyone
adapts: every worker keeps the same rate and the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def step_kl_sum(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> float:
    """Sum over masked tokens of the k3 estimate of KL(before || after); all (B, T)."""
    d = (after - before) * mask
    return float(((torch.exp(d) - 1.0 - d) * mask).sum())


@dataclass
class AdaptiveLR:
    target_kl: float  # <= 0: off (the multiplier stays 1)
    factor: float = 1.5
    min_mult: float = 1.0 / 64.0
    mult: float = 1.0

    @property
    def enabled(self) -> bool:
        return self.target_kl > 0

    def update(self, kl: float) -> float:
        """Takes the KL of the step just taken; returns the multiplier for the next."""
        if not self.enabled:
            return self.mult
        if kl > 2.0 * self.target_kl:
            self.mult = max(self.min_mult, self.mult / self.factor)
        elif kl < self.target_kl / 2.0:
            self.mult = min(1.0, self.mult * self.factor)
        return self.mult
