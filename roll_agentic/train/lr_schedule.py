"""The learning rate of each optimizer step: constant, or decayed over the run.

    constant: lr
    cosine:   lr * (r + (1 - r) * (1 + cos(pi * s / (S - 1))) / 2)
    linear:   lr * (r + (1 - r) * (1 - s / (S - 1)))
with s the step being taken (0-based), S = trainer.total_steps and
r = trainer.lr_min_ratio; a linear warm-up over trainer.lr_warmup_steps scales
the first steps. Computed from the step index alone, so a resumed run takes
exactly the rates the uninterrupted run would have.

Why decay: with one update per step and no stale samples (alpha=0), PPO's clip
never acts, and a constant rate keeps moving a policy that has already found
what the task rewards; on the shipped tasks that late drift collapses it onto a
few fixed replies and the reward sinks back (measured; see the README).
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine", "linear")


def lr_at(step: int, base_lr: float, total_steps: int, schedule: str = "constant",
          min_ratio: float = 0.0, warmup_steps: int = 0) -> float:
    if schedule not in SCHEDULES:
        raise ValueError(f"lr schedule must be one of {SCHEDULES}, got {schedule!r}")
    warm = min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    if schedule == "constant" or total_steps <= 1:
        return base_lr * warm
    frac = min(1.0, max(0.0, step / (total_steps - 1)))
    shape = (1.0 + math.cos(math.pi * frac)) / 2.0 if schedule == "cosine" else 1.0 - frac
    return base_lr * warm * (min_ratio + (1.0 - min_ratio) * shape)
