"""`bench tail` end to end on the hf engine: both schedules measured in one run, the JSON keys."""

import pytest

from roll_agentic.bench.tail import longest_over_median, run


class _T:
    def __init__(self, turns: int):
        self.num_turns = turns


def test_longest_over_median_is_taken_per_step_then_the_median_over_steps():
    steps = [[[_T(1), _T(2)], [_T(2), _T(30)]],  # 30 / 2 = 15
             [[_T(1), _T(1)], [_T(1), _T(25)]],  # 25 / 1 = 25
             [[_T(4), _T(4)], [_T(4), _T(4)]]]  # 1
    assert longest_over_median(steps) == 15
    assert longest_over_median([]) == 0.0


@pytest.mark.slow
def test_tail_bench_measures_both_schedules_in_one_run(tiny_model_path):
    out = run("hf", prompts=2, responses=2, steps=3, eta=1.5, workers=1, env_step_s=0.001)
    assert out["backend"] == "hf" and out["env_step_s"] == 0.001
    assert len(out["sync_step_s"]) == len(out["tail_step_s"]) == 3
    assert out["rounds_short"] + out["rounds_long"] == 4  # three measured rounds and the warm-up one
    assert out["aborted_prompts"] >= out["rounds_short"]  # eta 1.5 x 2 prompts: one cut per short round
    assert out["tail_batching_speedup"] == pytest.approx(
        out["sync_rollout_s_per_step"] / out["tail_rollout_s_per_step"], rel=0.02)
    assert out["sync_longest_over_median"] >= 1.0
    assert out["stream_update_max_abs_diff"] < 1e-5  # float64: what streaming itself changes
    assert out["stream_update_max_abs_diff_fp32"] >= 0 and out["rerun_max_abs_diff_fp32"] >= 0
