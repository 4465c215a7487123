"""Banked slack in the simulator: running jobs' SLO targets follow their whole run."""

from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import WorkloadSpec, generate_trace

SPEC = ClusterSpec(migration=True)
TRACE = generate_trace(1, WorkloadSpec(n_jobs=30, span_days=2.0, h_min=12, h_max=36))
SUBMITTED = {j.profile.job_id: j.profile.slo for j in TRACE.jobs}


def _targets(bank: bool, horizon_s: float) -> dict[str, float]:
    sim = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, bank_slack=bank), horizon_s=horizon_s)
    sim.run(TRACE.jobs)
    return {j: p.slo for g in sim.groups.values() for j, p in g.members.items()}


def test_running_jobs_get_new_targets_only_with_banking():
    midway = 1.5 * 86400.0
    plain, banked = _targets(False, midway), _targets(True, midway)
    assert plain and all(plain[j] == SUBMITTED[j] for j in plain)
    moved = [j for j in banked if banked[j] != SUBMITTED[j]]
    assert moved, "some running job has a target of its own by now"
    # Ahead of their SLOs (they ran alone or in groups paced by others): more.
    assert any(banked[j] > SUBMITTED[j] for j in moved)
    assert all(1.0 <= banked[j] <= 2.0 * SUBMITTED[j] for j in banked)


def test_every_job_is_judged_on_the_slo_it_was_submitted_with_and_keeps_it():
    result = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, bank_slack=True)).run(TRACE.jobs)
    assert {o.job_id: o.slo for o in result.jobs} == SUBMITTED
    assert all(o.iters_done == o.n_iters for o in result.jobs)
    assert result.slo_attainment == 1.0


def test_only_the_jobs_looked_at_are_retargeted(monkeypatch):
    # Targets are re-taken at the iteration ends the simulator looks at
    # anyway (a job alone, or whose group changed): not at every one.
    calls = []
    real = ClusterSimulator._bank
    monkeypatch.setattr(ClusterSimulator, "_bank", lambda self, rt, now: calls.append(1) or real(self, rt, now))
    result = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, bank_slack=True)).run(TRACE.jobs)
    ends = sum(o.iters_done - 1 for o in result.jobs)  # iteration ends before a job's last
    assert 0 < len(calls) < ends / 2
    assert result.slo_attainment == 1.0
