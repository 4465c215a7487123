"""Optional long-tail migration inside a rollout phase (RollMux, section 2).

Rollout length is set by its longest responses. When ~80% of a phase's
responses have finished, the stragglers are moved onto a few GPUs (their KV
caches are recomputed there) and the freed GPUs start the next job's rollout
in the group's round robin, instead of idling through the tail.

Model: response decode time is proportional to its length; lengths are
long-tailed (lognormal, capped at the max token limit). This module only
plans: when to trigger, how many GPUs the stragglers keep, how long the
tail lasts there, and how much earlier the next rollout can finish.

The simulator and the plans apply it as a fluid model (`tail_hold`): a
rollout holds its nodes whole until the trigger, then the stragglers'
share of them until its end; the next rollout queued on those nodes
starts once that GPU time is spent. Starting on the freed GPUs at their
share of the speed, it ends no later than that (`tail_gain`: earlier
when it is shorter than the tail), so the model errs on the slow side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MigrationPlan:
    trigger_s: float  # time into the phase when `done_fraction` of responses finished
    tail_s: float  # phase end minus trigger, stragglers included
    straggler_gpus: int  # GPUs the stragglers are consolidated onto
    freed_gpus: int
    overhead_s: float  # re-prefill of the stragglers' contexts on their new GPUs


def plan_migration(
    finish_s: np.ndarray,
    gpus: int,
    done_fraction: float = 0.8,
    tp: int = 1,
    overhead_s: float = 3.0,
) -> MigrationPlan | None:
    """Plan a migration for a phase whose responses finish at `finish_s`.

    Stragglers keep GPUs in proportion to their share of the batch, rounded
    up to whole tensor-parallel groups of `tp`. None when nothing is freed.
    """
    if gpus <= tp or finish_s.size == 0:
        return None
    order = np.sort(finish_s)
    k = min(order.size - 1, max(0, math.ceil(done_fraction * order.size) - 1))
    trigger = float(order[k])
    stragglers = order.size - (k + 1)
    keep = max(tp, tp * math.ceil(gpus * stragglers / order.size / tp))
    if keep >= gpus:
        return None
    return MigrationPlan(trigger, float(order[-1]) - trigger, keep, gpus - keep, overhead_s)


def tail_gain(plan: MigrationPlan, gpus: int, next_roll_s: float) -> float:
    """Seconds by which the next job's rollout ends earlier thanks to migration.

    Without migration it starts at the phase end and lasts `next_roll_s`.
    With it, it starts at the trigger on the freed GPUs (speed freed/gpus)
    and speeds up to all GPUs when the tail ends.
    """
    tail = plan.tail_s + plan.overhead_s
    partial_work = min(1.0, tail * plan.freed_gpus / gpus / next_roll_s)
    done_at = plan.trigger_s + (
        next_roll_s / (plan.freed_gpus / gpus)
        if partial_work >= 1.0
        else tail + (1.0 - partial_work) * next_roll_s
    )
    return (plan.trigger_s + plan.tail_s + next_roll_s) - done_at


def lognormal_finish_times(
    n: int, median_s: float, sigma: float, cap_s: float, seed: int = 0
) -> np.ndarray:
    """Finish times of `n` responses with long-tailed lengths, capped."""
    rng = np.random.default_rng(seed)
    return np.minimum(cap_s, median_s * np.exp(sigma * rng.standard_normal(n)))


def tail_hold(
    gpus: int,
    tp: int = 1,
    sigma: float = 1.1,
    n_responses: int = 1024,
    cap_over_median: float = 33.0,
    done_fraction: float = 0.8,
    draws: int = 4,
    seed: int = 0,
) -> float:
    """Share of a rollout phase for which migration holds its GPUs (fluid).

    Response lengths are lognormal(`sigma`) with the median at
    1/`cap_over_median` of the token cap; a response finishes at a time
    proportional to its length (decode-bound, every response in flight from
    the start), and the phase lasts as long as its longest response. The
    phase holds all `gpus` until `done_fraction` are done, then
    `straggler_gpus` until the end: (trigger + keep/gpus x tail) / length,
    averaged over `draws` batches. 1.0 when nothing can be freed.
    """
    rng = np.random.default_rng(seed)
    shares = []
    for _ in range(draws):
        finish = np.minimum(cap_over_median, np.exp(sigma * rng.standard_normal(n_responses)))
        plan = plan_migration(finish, gpus, done_fraction, tp, overhead_s=0.0)
        if plan is None:
            return 1.0
        longest = plan.trigger_s + plan.tail_s
        shares.append((plan.trigger_s + plan.straggler_gpus / gpus * plan.tail_s) / longest)
    return float(np.mean(shares))
