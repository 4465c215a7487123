"""Per-pool step metrics: busy fraction, queue, token rates, routing, fallbacks, cost; and their display."""

import pytest

from roll_agentic.telemetry.progress import pool_summary, pools_in
from roll_agentic.train.step_metrics import pool_metrics


def _engine(pool, busy, up, out=0, per_task=None, alive=True):
    return {"pool": pool, "busy_s": busy, "uptime_s": up, "outstanding": out, "alive": alive,
            "per_task": per_task or {}, "engine": {}}


def test_pool_figures_over_a_step():
    last = [_engine("fast", 10, 100, per_task={"lake": {"requests": 5, "prefill_tokens": 1000, "decode_tokens": 50}}),
            _engine("default", 0, 100), _engine("default", 0, 100)]
    now = [_engine("fast", 15, 110, out=3,
                   per_task={"lake": {"requests": 9, "prefill_tokens": 3000, "decode_tokens": 90}}),
           _engine("default", 10, 110, out=1, per_task={"math": {"requests": 2, "prefill_tokens": 40,
                                                                 "decode_tokens": 400}}),
           _engine("default", 0, 110)]
    routing = {"routed": {"lake": {"fast": 4}, "math": {"default": 2}}, "fallbacks": 0, "fallbacks_by_pool": {},
               "decode_per_request": {"math": 200.0}}
    m = pool_metrics(now, last, step_s=10.0, routing=routing, prices={"fast": 3.6, "default": 1.8})
    assert m["pool/fast/busy_fraction"] == pytest.approx(0.5)  # 5 busy seconds of the last 10
    assert m["pool/default/busy_fraction"] == pytest.approx(0.5)  # (1.0 + 0.0) / 2 engines
    assert m["pool/fast/outstanding"] == 3 and m["pool/default/outstanding"] == 1
    assert m["pool/fast/prefill_tokens_per_s"] == pytest.approx(200) and m["pool/fast/decode_tokens_per_s"] == 4
    assert m["pool/default/decode_tokens_per_s"] == pytest.approx(40)
    assert m["pool/fast/cost_usd"] == pytest.approx(3.6 / 3600 * 110)  # engines x price x uptime
    assert m["pool/default/cost_usd"] == pytest.approx(1.8 / 3600 * 220)
    assert m["cost/pools_usd"] == pytest.approx(m["pool/fast/cost_usd"] + m["pool/default/cost_usd"])
    assert m["pool/fast/routed/lake"] == 4 and m["pool/fast/served/lake"] == 9
    assert m["router/fallbacks"] == 0 and m["router/math/decode_per_request"] == 200


def test_a_dead_pool_reports_no_live_engine_its_fallbacks_and_a_frozen_cost():
    stale = _engine("fast", 15, 110, per_task={"lake": {"requests": 9, "prefill_tokens": 3000, "decode_tokens": 90}})
    dead = dict(stale, alive=False, outstanding=0)  # what collect_engine_stats gives for a killed engine
    m = pool_metrics([dead], [stale], step_s=10.0, routing={"routed": {}, "fallbacks": 3,
                                                             "fallbacks_by_pool": {"fast": 3}}, prices={"fast": 3.6})
    assert m["pool/fast/live_engines"] == 0 and m["pool/fast/busy_fraction"] == 0
    assert m["pool/fast/prefill_tokens_per_s"] == 0  # nothing served since
    assert m["pool/fast/cost_usd"] == pytest.approx(3.6 / 3600 * 110)
    assert m["router/fallbacks"] == 3 and m["pool/fast/fallbacks"] == 3


def test_the_progress_display_has_a_line_per_pool():
    m = pool_metrics([_engine("fast", 5, 10, out=2), _engine("default", 1, 10)], None, 10.0,
                     {"routed": {}, "fallbacks": 1, "fallbacks_by_pool": {"fast": 1}}, {"fast": 1.0})
    assert pools_in(m) == ["default", "fast"]
    line = pool_summary(m, "fast")
    assert "busy 50%" in line and "queue 2" in line and "fallbacks 1" in line
