"""Traces: reproducible from a seed, lossless through JSON, bursty on request."""

import numpy as np

from roll_agentic.sim.trace import Trace, WorkloadSpec, generate_trace


def test_same_seed_same_trace_and_json_round_trip(tmp_path):
    a = generate_trace(7, WorkloadSpec(n_jobs=30))
    assert a.jobs == generate_trace(7, WorkloadSpec(n_jobs=30)).jobs
    assert a.jobs != generate_trace(8, WorkloadSpec(n_jobs=30)).jobs
    path = tmp_path / "trace.json"
    a.save(path)
    b = Trace.load(path)
    assert b.jobs == a.jobs and b.workload == a.workload and b.seed == 7


def test_profiles_cover_kinds_sizes_and_slo_range():
    t = generate_trace(0, WorkloadSpec(n_jobs=300))
    assert {j.profile.kind for j in t.jobs} == {"balanced", "rollout_heavy", "train_heavy"}
    assert {j.profile.size for j in t.jobs} == {"small", "medium", "large"}
    slos = [j.profile.slo for j in t.jobs]
    assert 1.0 <= min(slos) and max(slos) <= 2.0
    for j in t.jobs:
        p = j.profile
        share = p.roll_s / (p.roll_s + p.train_s)
        if p.kind == "rollout_heavy":
            assert share > 0.6
        if p.kind == "train_heavy":
            assert share < 0.4


def test_philly_arrivals_are_burstier_than_poisson():
    def cv(arrival):
        t = generate_trace(1, WorkloadSpec(n_jobs=400, arrival=arrival))
        gaps = np.diff([j.arrival_s for j in t.jobs])
        return gaps.std() / gaps.mean()

    assert 0.8 < cv("poisson") < 1.2
    assert cv("philly") > 1.5


def test_profiles_carry_the_typical_phase_lengths_the_simulator_draws():
    from roll_agentic.sim.cluster import iteration_factors
    from roll_agentic.sim.trace import typical_fractions

    roll, train = iteration_factors(seed=7, n_iters=200_000)
    r_typ, t_typ = typical_fractions()
    assert abs(float(np.mean(roll)) - r_typ) < 0.002
    assert abs(float(np.mean(train)) - t_typ) < 0.002
    p = generate_trace(0, WorkloadSpec(n_jobs=3)).jobs[0].profile
    assert (p.roll_typical, p.train_typical) == (round(r_typ, 4), round(t_typ, 4))
