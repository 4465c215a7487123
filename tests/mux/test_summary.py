"""mux_summary.json and mux_passes.json across a resumed session (mux/summary.py)."""

from __future__ import annotations

import json

import pytest

from roll_agentic.mux.summary import earlier_passes, write_summary


def _job(ends: list[float]) -> dict:
    return {"slo": 1.5, "state": "done", "step_ends": ends, "profile": {"solo_iter_s": 1.0},
            "run_dir": "/nonexistent", "warm_switch_s": None, "cold_switch_s": None}


def _pass(ends: list[float], end: float) -> dict:
    return {"start": 0.0, "end": end, "pool_busy_fraction": {"rollout": 0.5, "train": 0.5}, "intervals": [],
            "jobs": {"a": _job(ends)}}


def test_a_resumed_session_keeps_the_first_sessions_solo_pass_and_its_multiplexed_pass(tmp_path):
    """A resume runs no solo baseline, and its summary replaced the first session's passes file:
    the solo pass, and the first multiplexed pass, were lost."""
    solo, first = _pass([0, 1, 2, 3, 4, 5], 20.0), _pass([0, 1, 2, 3.2], 5.0)
    write_summary(tmp_path, first, solo)

    earlier = earlier_passes(tmp_path)
    assert earlier["solo"] == solo
    resumed = _pass([0, 1, 2, 3.2, 4.4, 5.6], 9.0)
    summary = write_summary(tmp_path, resumed, earlier["solo"], earlier)
    assert summary["job_slowdown_basis"]["a"] == "solo pass"
    assert summary["job_slowdown"]["a"] == pytest.approx(1.2)
    passes = json.loads((tmp_path / "mux_passes.json").read_text())
    assert passes["solo"] == solo and passes["mux"] == resumed and passes["mux_before_resume"] == [first]

    # Resumed again: every earlier multiplexed pass is kept, oldest first.
    write_summary(tmp_path, _pass([0, 1], 2.0), solo, earlier_passes(tmp_path))
    assert json.loads((tmp_path / "mux_passes.json").read_text())["mux_before_resume"] == [first, resumed]


def test_no_or_unreadable_earlier_passes_are_none(tmp_path):
    assert earlier_passes(tmp_path) == {}
    (tmp_path / "mux_passes.json").write_text("{not json")
    assert earlier_passes(tmp_path) == {}
