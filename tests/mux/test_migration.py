"""Long-tail migration planning."""

import numpy as np

from roll_agentic.mux.migration import (
    lognormal_finish_times,
    plan_migration,
    tail_gain,
    tail_hold,
)


def test_long_tail_frees_most_gpus_and_pays_off():
    # RollPacker: the longest response is 25-32x the median.
    finish = lognormal_finish_times(512, median_s=40.0, sigma=1.2, cap_s=1200.0, seed=1)
    plan = plan_migration(finish, gpus=8)
    assert plan is not None
    assert plan.trigger_s < 0.3 * finish.max()  # 80 % are done early
    assert plan.straggler_gpus == 2 and plan.freed_gpus == 6
    gain = tail_gain(plan, gpus=8, next_roll_s=600.0)
    assert gain > 0.4 * plan.tail_s


def test_no_migration_without_a_tail_or_spare_gpus():
    uniform = np.full(64, 100.0)
    plan = plan_migration(uniform, gpus=8)
    assert plan is None or plan.tail_s == 0.0
    assert plan_migration(np.arange(1, 65.0), gpus=1) is None
    tp_plan = plan_migration(np.arange(1, 65.0), gpus=8, tp=4)
    assert tp_plan is not None and tp_plan.straggler_gpus == 4


def test_tail_hold_of_rollpacker_like_tails():
    # sigma 1.0-1.2 over 1,024 responses: the longest is 25-32x the median.
    for gpus, tp in ((8, 1), (16, 2), (32, 4)):
        hold = tail_hold(gpus, tp, sigma=1.1)
        assert 0.25 < hold < 0.4  # 80 % done early; stragglers keep a quarter of the GPUs
    assert tail_hold(8, 1, sigma=1.1, seed=3) == tail_hold(8, 1, sigma=1.1, seed=3)
    # Heavier tails free more; without a tail, or with one GPU, nothing is freed.
    assert tail_hold(8, 1, sigma=1.4) < tail_hold(8, 1, sigma=0.8)
    assert tail_hold(8, 1, sigma=0.001) > 0.95
    assert tail_hold(1, 1) == 1.0
