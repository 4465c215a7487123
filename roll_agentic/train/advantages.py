"""Group-relative advantages: each trajectory's reward against its own group.

- grpo: A_i = (r_i - mean(r)) / (std(r) + eps), std with Bessel's
  correction, as in DeepSeekMath (Shao et al. 2024, eq. 3 / section 4.1.2).
- grpo_no_std: A_i = r_i - mean(r) (Dr. GRPO, Liu et al. 2025): dividing by
  the std weighs groups that nearly agree (low std) the most, a bias toward
  prompts that are too easy or too hard.
- rloo: A_i = r_i - mean of the others' rewards (REINFORCE leave-one-out,
  Ahmadian et al. 2024) = n / (n - 1) (r_i - mean(r)): an unbiased baseline.

A group whose rewards are all equal carries no signal: its advantages are 0
under each.
"""

from __future__ import annotations

import torch

from roll_agentic.config import ADVANTAGE_ESTIMATORS


def group_advantages(rewards: torch.Tensor, estimator: str = "grpo", eps: float = 1e-6) -> torch.Tensor:
    """rewards: (G,) of one group -> advantages (G,) under `estimator` (module doc)."""
    if estimator == "grpo":
        return grpo_advantages(rewards, eps)
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"advantage estimator must be one of {', '.join(ADVANTAGE_ESTIMATORS)}, not {estimator!r}")
    if rewards.numel() < 2:
        raise ValueError(f"{estimator} advantages: a group needs at least 2 rewards")
    if bool((rewards == rewards[0]).all()):
        return torch.zeros_like(rewards)  # exactly: see grpo_advantages
    centered = rewards - rewards.mean()
    if estimator == "rloo":
        n = rewards.numel()
        return centered * (n / (n - 1))
    return centered


def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rewards: (G,) of one group -> advantages (G,)."""
    if rewards.numel() < 2:
        raise ValueError("grpo_advantages: a group needs at least 2 rewards")
    if bool((rewards == rewards[0]).all()):
        # No signal, exactly: mean() of equal inexact floats can be an ulp off, and that
        # rounding error over a std of the same size was nan (eps = 0) or ~ulp/eps, not 0.
        return torch.zeros_like(rewards)
    centered = rewards - rewards.mean()
    std = rewards.std(unbiased=True)
    return centered / (std + eps)
