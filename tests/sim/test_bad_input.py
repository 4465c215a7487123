"""Hand-edited traces, cluster files and output paths: one line naming what to fix, exit 2, before any run."""

import json
import os

import pytest

from roll_agentic.sim import cli
from roll_agentic.sim.cluster_file import load_cluster
from roll_agentic.sim.trace import MAX_NODES, Trace, WorkloadSpec, generate_trace
from roll_agentic.sim.trace_csv import REQUIRED, trace_from_csv


def _trace_doc(tmp_path) -> dict:
    path = tmp_path / "good.json"
    generate_trace(3, WorkloadSpec(n_jobs=3)).save(path)
    return json.loads(path.read_text())


def _refused_by_cli(tmp_path, capsys, doc: dict, *says: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["compare", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    for s in says:
        assert s in err


def test_a_job_id_that_is_no_string_is_named_not_a_traceback(tmp_path, capsys):
    """A list or object as job_id crashed the repeat check with `unhashable type`."""
    for bad in ([3], {"a": 1}):
        doc = _trace_doc(tmp_path)
        doc["jobs"][1]["profile"]["job_id"] = bad
        _refused_by_cli(tmp_path, capsys, doc, "job #1", "job_id must be a non-empty string")


def test_a_malformed_workload_or_job_entry_is_named_at_load(tmp_path, capsys, monkeypatch):
    """A short or non-numeric `workload.slo_range` ran the whole comparison, then failed on
    `not enough values to unpack`; a job that is no object said `'int' object is not subscriptable`."""
    import roll_agentic.sim.compare as compare_module

    def no_run(*args, **kwargs):
        raise AssertionError("simulated a trace that should have been refused")

    monkeypatch.setattr(compare_module, "run_policies", no_run)
    for slo_range in ([1], ["a", "b"], [2, 1], [1, float("nan")]):
        doc = _trace_doc(tmp_path)
        doc["workload"]["slo_range"] = slo_range
        _refused_by_cli(tmp_path, capsys, doc, "workload.slo_range must be two numbers LO <= HI")
    doc = _trace_doc(tmp_path)
    doc["workload"]["arrival"] = 5
    _refused_by_cli(tmp_path, capsys, doc, "workload.arrival must be a string")
    doc = _trace_doc(tmp_path)
    doc["jobs"][2] = 7
    _refused_by_cli(tmp_path, capsys, doc, "job #2 must be an object with arrival_s, n_iters, seed and profile")
    doc = _trace_doc(tmp_path)
    doc["jobs"][0]["profile"] = [1]
    _refused_by_cli(tmp_path, capsys, doc, "job #0", "'profile' must be an object")


def test_node_counts_past_what_a_run_can_hold_are_refused(tmp_path):
    """A typo of 1000000 rollout nodes never finished (10,000 already ran past minutes)."""
    doc = _trace_doc(tmp_path)
    doc["jobs"][0]["profile"]["n_rollout"] = 1_000_000
    doc["jobs"][1]["profile"]["n_train"] = MAX_NODES + 1
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        Trace.load(path)
    assert f"job #0 (j0000): n_rollout must be a whole number of nodes from 1 to {MAX_NODES}" in str(err.value)
    assert "job #1 (j0001): n_train" in str(err.value)
    doc["jobs"][0]["profile"]["n_rollout"] = MAX_NODES
    doc["jobs"][1]["profile"]["n_train"] = 2
    path.write_text(json.dumps(doc))
    assert Trace.load(path).jobs[0].profile.n_rollout == MAX_NODES  # the cap itself loads
    csv_path = tmp_path / "jobs.csv"
    csv_path.write_text(",".join(REQUIRED) + "\n0,7,1000000,1,900,1100,1.3,48\n0,7,1,2000,900,1100,1.3,48\n")
    with pytest.raises(ValueError) as err:
        trace_from_csv(csv_path)
    assert "line 2 (j0000): rollout_nodes must be" in str(err.value)
    assert "line 3 (j0001): train_nodes must be" in str(err.value)


def test_a_malformed_yaml_cluster_file_is_one_line(tmp_path):
    """PyYAML's messages span lines (the text, a caret under it): the one-line error was four."""
    for text in ("{a: [}\n", "? [a]\n: 1\n", "rollout: {name: [\n"):
        path = tmp_path / "cluster.yaml"
        path.write_text(text)
        with pytest.raises(ValueError) as err:
            load_cluster(path)
        assert "is not YAML" in str(err.value) and "line " in str(err.value)
        assert "\n" not in str(err.value)


def test_optimality_and_scale_refuse_jobs_that_fit_no_node(tmp_path, capsys):
    """`compare` refused a cluster whose nodes hold no job's state; `optimality` and `scale` ran on it."""
    path = tmp_path / "cluster.yaml"
    path.write_text("rollout: {host_mem_gb: 10}\n")
    for argv in (["optimality", "--instances", "2", "--jobs", "3", "--budget", "20"], ["scale", "--jobs", "5"]):
        assert cli.main([*argv, "--cluster", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert "needs 14 GB of host memory per rollout node; one H20 node has 10 GB" in err
        assert "\n" not in err


def test_an_unusable_plot_or_save_trace_path_names_its_flag_before_the_run(tmp_path, capsys, monkeypatch):
    """`--plot FILE` said `[Errno 17] File exists`, and a folder it could not write to failed
    only after every policy was simulated."""
    import roll_agentic.sim.compare as compare_module

    def no_run(*args, **kwargs):
        raise AssertionError("simulated although the output path is unusable")

    monkeypatch.setattr(compare_module, "run_policies", no_run)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert cli.main(["compare", "--jobs", "2", "--plot", str(a_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--plot {a_file}: cannot write plots there" in err and "\n" not in err
    assert cli.main(["compare", "--jobs", "2", "--save-trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--save-trace {tmp_path}: cannot write the trace there" in err and "\n" not in err
    if os.geteuid() != 0:  # root writes through a read-only mode
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert cli.main(["compare", "--jobs", "2", "--plot", str(locked)]) == 2
        assert "--plot" in capsys.readouterr().err


def test_seed_beside_seeds_is_refused_not_dropped(capsys):
    """`--seeds 0 --seed 5` compared seed 0 alone and said nothing of the 5."""
    assert cli.main(["compare", "--seeds", "0", "--seed", "5", "--jobs", "3", "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--seeds generates one trace per seed; it does not combine with --seed" in err


def test_repack_of_jobs_that_arrive_at_once_is_one_snapshot(tmp_path):
    """Every instant was the same one: six identical rows reported as six snapshots."""
    from dataclasses import replace

    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.repack import repack_report

    trace = generate_trace(1, WorkloadSpec(n_jobs=3))
    trace.jobs[:] = [replace(j, arrival_s=0.0) for j in trace.jobs]
    doc = repack_report(trace, ClusterSpec(migration=True), snapshots=6)
    assert doc["snapshots"] == 1 and len(doc["per_snapshot"]) == 1
    assert doc["per_snapshot"][0]["jobs"] == 3
