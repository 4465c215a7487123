"""Iterations count from a job's first admitted step, however many steps its probe took."""

from __future__ import annotations

import pytest

from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.summary import build_summary

# A probe of 3 steps (profile_steps: 3), a long wait for placement and a cold switch-in
# ending the first admitted step at 30, then iterations of 1 s.
ENDS = [0.0, 1.0, 2.0, 30.0, 31.0, 32.0]


def test_status_counts_iterations_from_the_first_admitted_step():
    rec = JobRecord("j", 1.5, 10, state=JobState.RUNNING, profile={"solo_iter_s": 1.0}, step_ends=ENDS,
                    first_admitted_end=3)
    assert rec.iteration_times() == [1.0, 1.0]  # a fixed skip of 2 counted the 28 s wait as one
    assert rec.to_dict()["slowdown_estimate"] == pytest.approx(1.0)
    assert JobRecord("k", 1.5, 10, step_ends=[0.0, 1.0, 2.0, 3.5]).iteration_times() == [1.5]  # default probe: 2


def test_the_summary_does_not_report_a_missed_slo_for_the_wait_before_admission():
    job = {"slo": 1.5, "state": "done", "step_ends": ENDS, "first_admitted_end": 3, "profile": {"solo_iter_s": 1.0},
           "run_dir": "/nonexistent", "warm_switch_s": None, "cold_switch_s": None}
    mux = {"start": 0.0, "end": 32.0, "pool_busy_fraction": {"rollout": 0.5}, "jobs": {"j": job}}
    s = build_summary(mux, None)
    assert s["job_iteration_s"]["j"]["mux"] == pytest.approx(1.0)
    assert s["job_slowdown"]["j"] == pytest.approx(1.0) and s["job_slo_met"]["j"] is True
