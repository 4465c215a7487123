"""Banked SLO slack: what the rest of a running job's run may take."""

import pytest

from roll_agentic.mux.slack import MAX_SLO_FACTOR, remaining_slo

ITER_S, N, HEADROOM = 100.0, 10, 0.05


def test_a_job_that_has_not_started_keeps_its_slo():
    assert remaining_slo(1.5, ITER_S, 0.0, 0.0, N, HEADROOM) == pytest.approx(1.5)


def test_a_job_ahead_of_its_slo_may_run_its_rest_slower_and_still_keep_it_with_headroom():
    # Alone at full speed for half its run: 500 s spent on 500 s of solo work.
    target = remaining_slo(1.5, ITER_S, 500.0, 500.0, 5, HEADROOM)
    assert 1.5 < target < MAX_SLO_FACTOR * 1.5
    # Each remaining iteration at the slowest period the checks allow:
    finish = 500.0 + 5 * target * ITER_S / (1.0 + HEADROOM)
    assert finish == pytest.approx(1.5 * N * ITER_S / (1.0 + HEADROOM))


def test_a_job_behind_its_slo_gets_less_but_never_below_no_slowdown():
    slower = remaining_slo(1.5, ITER_S, 700.0, 400.0, 6, HEADROOM)
    assert 1.0 < slower < 1.5
    assert remaining_slo(1.5, ITER_S, 1400.0, 500.0, 5, HEADROOM) == 1.0


def test_with_few_iterations_left_the_target_is_capped():
    assert remaining_slo(1.2, ITER_S, 900.0, 900.0, 1, HEADROOM) == MAX_SLO_FACTOR * 1.2


def test_a_finished_job_keeps_its_slo():
    assert remaining_slo(1.3, ITER_S, 1000.0, 1000.0, 0, HEADROOM) == 1.3


def test_a_job_running_at_its_planned_pace_never_needs_a_lower_target():
    # Why the simulator may leave a job's target alone between looks: an
    # iteration run within the target (at most target x its solo time, less
    # the headroom) leaves the next target at least as high.
    import numpy as np

    rng = np.random.default_rng(0)
    for _ in range(2000):
        slo = rng.uniform(1.0, 2.0)
        left = int(rng.integers(2, 40))
        done = float(rng.integers(0, 40)) * ITER_S
        elapsed = done * rng.uniform(0.8, 2.2)
        target = remaining_slo(slo, ITER_S, elapsed, done, left, HEADROOM)
        period = target * ITER_S / (1.0 + HEADROOM) * rng.uniform(0.5, 1.0)
        after = remaining_slo(slo, ITER_S, elapsed + period, done + ITER_S, left - 1, HEADROOM)
        assert after >= target - 1e-9
