"""The learning rate of each optimizer step: constant, or decayed over the run.

    constant: lr
    cosine:   lr * (r + (1 - r) * (1 + cos(pi * d / (D - 1))) / 2)
    linear:   lr * (r + (1 - r) * (1 - d / (D - 1)))
with s the step being taken (0-based), W = trainer.lr_warmup_steps, S =
trainer.total_steps, r = trainer.lr_min_ratio, d = s - W and D = S - W: the
first W steps ramp linearly up to lr, (s + 1) / W of it, and the decay runs over
the steps after them (the usual warm-up-then-decay; a warm-up that scaled the
decayed rate peaked far below lr: 28 % of it for 80 steps of 80). Computed from
the step index alone, so a resumed run takes exactly the rates the
uninterrupted run would have.

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
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps
    if schedule == "constant" or decay_steps <= 1:
        return base_lr
    frac = min(1.0, max(0.0, (step - warmup_steps) / (decay_steps - 1)))
    shape = (1.0 + math.cos(math.pi * frac)) / 2.0 if schedule == "cosine" else 1.0 - frac
    return base_lr * (min_ratio + (1.0 - min_ratio) * shape)
