"""Traces: reproducible from a seed, lossless through JSON, bursty on request."""

import json

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
    from roll_agentic.sim.trace import iteration_factors, typical_fractions

    roll, train = iteration_factors(seed=7, n_iters=200_000)
    r_typ, t_typ = typical_fractions()
    assert abs(float(np.mean(roll)) - r_typ) < 0.002
    assert abs(float(np.mean(train)) - t_typ) < 0.002
    p = generate_trace(0, WorkloadSpec(n_jobs=3)).jobs[0].profile
    assert (p.roll_typical, p.train_typical) == (round(r_typ, 4), round(t_typ, 4))


def test_profiles_carry_their_tail_and_old_traces_load_without_one(tmp_path):
    import json

    t = generate_trace(0, WorkloadSpec(n_jobs=40))
    holds = [j.profile.tail_hold for j in t.jobs]
    assert all(0.25 < h < 0.4 for h in holds) and len(set(holds)) > 10
    # The tail has a stream of its own: every other field is as before it.
    path = tmp_path / "old.json"
    t.save(path)
    doc = json.loads(path.read_text())
    del doc["workload"]["tail_sigma_range"], doc["workload"]["responses_per_step"]
    for j in doc["jobs"]:
        del j["profile"]["tail_hold"]
    path.write_text(json.dumps(doc))
    old = Trace.load(path)
    assert all(j.profile.tail_hold == 1.0 for j in old.jobs)  # no migration gain assumed
    assert [j.profile.roll_s for j in old.jobs] == [j.profile.roll_s for j in t.jobs]


def test_a_bad_trace_file_is_refused_with_what_is_wrong(tmp_path):
    import json

    import pytest

    good = tmp_path / "good.json"
    generate_trace(3, WorkloadSpec(n_jobs=3)).save(good)
    doc = json.loads(good.read_text())

    def refused(content: str | None, *words: str) -> None:
        path = tmp_path / "t.json"
        if content is None:
            path = tmp_path / "missing.json"
        else:
            path.write_text(content)
        with pytest.raises(ValueError) as err:
            Trace.load(path)
        for w in words:
            assert w in str(err.value)

    refused(None, "cannot read trace", "missing.json")
    refused("{not json", "is not JSON")
    refused(json.dumps({"jobs": []}), "'seed', 'workload' and 'jobs'", "--save-trace")
    refused(json.dumps({**doc, "workload": {**doc["workload"], "n_job": 3}}), "bad 'workload'", "n_job")
    no_seed = [dict(doc["jobs"][0]), *doc["jobs"][1:]]
    del no_seed[0]["seed"]
    refused(json.dumps({**doc, "jobs": no_seed}), "job #0 (j0000) has no 'seed'")
    bad_profile = [*doc["jobs"][:1], {**doc["jobs"][1], "profile": {"job_id": "x"}}]
    refused(json.dumps({**doc, "jobs": bad_profile}), "job #1")
    late = [*doc["jobs"][:2], {**doc["jobs"][2], "n_iters": 0}]
    refused(json.dumps({**doc, "jobs": late}), "job #2", "n_iters must be a whole number from 1")
    assert len(Trace.load(good).jobs) == 3  # the file it came from still loads


def test_impossible_profiles_in_a_trace_are_all_named_before_anything_runs(tmp_path):
    import json

    import pytest

    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.compare import compare

    good = tmp_path / "good.json"
    generate_trace(4, WorkloadSpec(n_jobs=4)).save(good)
    doc = json.loads(good.read_text())

    def with_profile(i: int, **fields) -> dict:
        bad = json.loads(json.dumps(doc))  # a deep copy: `doc` stays good
        bad["jobs"][i]["profile"].update(fields)
        return bad

    def refused(bad: dict, *words: str) -> None:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError) as err:
            Trace.load(path)
        for w in words:
            assert w in str(err.value)

    # Each would have crashed deep in the simulator or run a wrong experiment.
    refused(with_profile(1, n_rollout=0), "job #1 (j0001): n_rollout", ">= 1, got 0")
    refused(with_profile(2, roll_s=-5.0), "job #2", "roll_s", "> 0, got -5")
    refused(with_profile(0, slo=0.5), "slo", ">= 1 (1: none), got 0.5")
    refused(with_profile(3, tail_hold=0), "tail_hold", "in (0, 1], got 0")
    refused(with_profile(3, train_s="long"), "train_s", "got 'long'")
    refused(with_profile(1, n_train=True), "n_train", "got True")
    both = with_profile(1, slo=0.9)
    both["jobs"][2]["profile"]["roll_typical"] = 1.5
    refused(both, "2 problem(s)", "job #1", "job #2")
    refused(with_profile(2, job_id="j0000"), "job #2 (j0000): job_id repeats")
    # A state no node can hold is a property of the cluster, not of the file:
    # the trace loads; the comparison refuses it.
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(with_profile(0, train_mem_gb=5000.0)))
    huge = Trace.load(path)
    with pytest.raises(ValueError, match="5000 GB of host memory per training node; one H800 node has 1024 GB"):
        compare(huge, spec=ClusterSpec())


def test_forms_spread_jobs_over_bases_per_size_and_change_nothing_else(tmp_path, capsys):
    """`--forms K`: each job trains on one of K bases of its size (its trainer form); the
    trace is otherwise the one without forms, so the two compare job for job."""
    from dataclasses import replace

    from roll_agentic.sim import cli

    plain = generate_trace(3, WorkloadSpec(n_jobs=60))
    formed = generate_trace(3, WorkloadSpec(n_jobs=60, forms=2))
    assert {j.profile.form for j in plain.jobs} == {""}
    assert {j.profile.form for j in formed.jobs} == {f"{s}-base{k}" for s in ("small", "medium", "large")
                                                     for k in (0, 1)}
    assert all(j.profile.form.startswith(j.profile.size) for j in formed.jobs)
    assert [replace(j, profile=replace(j.profile, form="")) for j in formed.jobs] == plain.jobs
    formed.save(tmp_path / "t.json")
    assert Trace.load(tmp_path / "t.json").jobs == formed.jobs
    assert cli.main(["compare", "--jobs", "12", "--forms", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert 1 <= doc["trainer_forms"] <= 3 and doc["slo_attainment"]["rollmux"] == 1.0
