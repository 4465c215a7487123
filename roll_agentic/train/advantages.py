"""GRPO advantages: each trajectory's reward against its own group.

A_i = (r_i - mean(r)) / (std(r) + eps), std with Bessel's correction, as in
DeepSeekMath (Shao et al. 2024, eq. 3 / section 4.1.2). A group whose rewards
are all equal carries no signal: its advantages are 0.
"""

from __future__ import annotations

import torch


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
