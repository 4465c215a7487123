"""`bench engine` end to end on the hf engine: both sides measured, same prompts, the JSON keys."""

import pytest

from roll_agentic.bench.engine import run


@pytest.mark.slow
def test_engine_bench_measures_both_sides_in_one_run(tiny_model_path):
    out = run("hf", episodes=16, max_tokens=4, group_size=4, workers=2, repeats=2)
    assert out["backend"] == "hf" and out["episodes"] == 16
    assert len(out["framework_runs"]) == len(out["raw_runs"]) == 2
    assert all(x > 0 for x in out["framework_runs"] + out["raw_runs"])
    assert out["framework_vs_raw_engine"] == pytest.approx(max(out["framework_runs"]) / max(out["raw_runs"]), abs=2e-3)
    assert out["median_framework_vs_raw"] > 0
    pairs = sorted(f / r for f, r in zip(out["framework_runs"], out["raw_runs"], strict=True))
    assert out["paired_median_framework_vs_raw"] == pytest.approx((pairs[0] + pairs[1]) / 2, abs=2e-3)
