import json
from dataclasses import replace
from pathlib import Path

import pytest

from roll_agentic.sim import cli
from roll_agentic.sim.compare import compare
from roll_agentic.sim.trace import Trace
from roll_agentic.sim.trace_csv import OPTIONAL, REQUIRED, trace_from_csv

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "sim" / "jobs_example.csv"
HEADER = ",".join(REQUIRED)
GOOD_ROW = "0,7,1,1,900,1100,1.3,48"


def _csv(tmp_path, text: str) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


def test_the_shipped_example_becomes_a_trace_with_the_generated_traces_defaults():
    trace = Trace.load(EXAMPLE)  # by its suffix
    by_id = {j.profile.job_id: j for j in trace.jobs}
    assert len(by_id) == 6 and trace.workload.arrival == "file"
    assert [j.arrival_s for j in trace.jobs] == sorted(j.arrival_s for j in trace.jobs)
    swe = by_id["swe-32b"]
    assert swe.arrival_s == 2.5 * 3600 and swe.profile.kind == "rollout_heavy"
    assert swe.profile.size == "large" and (swe.profile.n_rollout, swe.profile.n_train) == (4, 2)
    assert swe.profile.tail_hold == 0.32  # given
    assert swe.profile.train_mem_gb == 16 * 32 / 2 and swe.profile.rollout_mem_gb == 64
    assert swe.profile.sync_s == round(2 * 32 / 5 + 5, 1)
    # One iteration is rollout + sync + training; 96 h of them.
    assert swe.n_iters == round(96 * 3600 / swe.profile.solo_iter_s)
    assert by_id["frozenlake-3b"].profile.tail_hold == 1.0  # no migration gain, as written
    assert 0.2 < by_id["math-7b"].profile.tail_hold < 0.45  # the tail model's estimate
    assert by_id["sokoban-7b"].profile.kind == "train_heavy"
    assert 0 < by_id["math-7b"].profile.roll_typical < 1


def test_a_csv_trace_runs_and_round_trips_through_json(tmp_path, capsys):
    out = tmp_path / "trace.json"
    assert cli.main(["compare", "--trace", str(EXAMPLE), "--save-trace", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["slo_attainment"]["rollmux"] == 1.0 and doc["arrival"] == "file"
    # A file's SLOs are reported as found in it, not as the generator's U(1, 2).
    slos = [j.profile.slo for j in trace_from_csv(EXAMPLE).jobs]
    assert doc["slo_range"] == [min(slos), max(slos)]
    again, _ = compare(Trace.load(out))
    assert again["cost_per_hour"] == doc["cost_per_hour"]
    assert Trace.load(out).jobs == trace_from_csv(EXAMPLE).jobs
    # The table's footer names no seed for a file's trace (--seed is refused with --trace).
    assert cli.main(["compare", "--trace", str(EXAMPLE)]) == 0
    footer = capsys.readouterr().out.strip().splitlines()[-1]
    assert footer.startswith("6 jobs, file arrivals, SLOs ") and "seed" not in footer
    assert "SLO met: share of jobs within their SLO" in footer and "slowdown: mean of each job's" in footer


def test_every_problem_of_every_line_is_named_at_once(tmp_path):
    rows = [
        "-1,7,0,1,abc,1100,0.9,48",  # line 2: four problems
        "0,7,1.5,1,900,1100,1.3,",  # line 3: a fraction of a node, no length
        "0,7,1,1,900,inf,1.3,48",  # line 4: not finite
        GOOD_ROW,  # line 5 is fine
    ]
    with pytest.raises(ValueError) as err:
        trace_from_csv(_csv(tmp_path, "\n".join([HEADER, *rows]) + "\n"))
    text = str(err.value)
    assert "7 problem(s)" in text
    for piece in (
        "line 2 (j0000): arrival_h must be hours since the trace's start, 0 to 87600 (ten years), got '-1'",
        "line 2 (j0000): rollout_nodes must be a whole number of nodes from 1 to 1024, got '0'",
        "line 2 (j0000): rollout_s must be a number, got 'abc'",
        "line 2 (j0000): slo must be a tolerated slowdown",
        "line 3 (j0001): rollout_nodes must be a whole number, got '1.5'",
        "line 3 (j0001): run_h is empty",
        "line 4 (j0002): train_s must be seconds",
    ):
        assert piece in text
    assert "line 5" not in text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "missing column(s) arrival_h"),
        ("arrival_h,params_b\n0,7\n", "missing column(s) rollout_nodes"),
        (f"{HEADER},colour\n{GOOD_ROW},red\n", "unknown column(s) colour"),
        (f"{HEADER}\n", "no jobs below the header"),
        (f"{HEADER}\n{GOOD_ROW},1\n", "line 2 (j0000): more fields than the header has columns"),
        (f"job_id,{HEADER}\na,{GOOD_ROW}\na,{GOOD_ROW}\n", "line 3 (a): job_id repeats"),
        (f"{HEADER},tail_hold\n{GOOD_ROW},1.5\n", "tail_hold must be a share of the rollout"),
        (f"{HEADER},rollout_tp\n{GOOD_ROW},16\n", "rollout_tp must be GPUs per inference engine"),
        # one row could run the machine out of memory (a 1e9-hour job: 24 GB of per-iteration draws)
        (f"{HEADER}\n0,7,1,1,900,1100,1.3,1e9\n", "at most 100000 per job are simulated"),
        (f"{HEADER}\n1e20,7,1,1,900,1100,1.3,48\n", "arrival_h must be hours since the trace's start, 0 to 87600"),
        # the last copy's values were taken, silently
        (f"{HEADER},slo\n{GOOD_ROW},1.5\n", "the header names slo more than once; keep one of each"),
        # raised to two iterations (100x the length given), silently
        (f"{HEADER}\n0,7,1,1,900,1100,1.3,0.01\n", "run_h must cover at least one iteration alone (0.56 h: "),
    ],
)
def test_a_malformed_file_is_refused_with_what_to_fix(tmp_path, text, says):
    with pytest.raises(ValueError, match="trace .*jobs.csv") as err:
        trace_from_csv(_csv(tmp_path, text))
    assert says in str(err.value)
    if "column(s)" in says:  # the valid columns are listed
        assert all(c in str(err.value) for c in REQUIRED + OPTIONAL)


def test_the_cli_reports_a_bad_csv_in_one_line(tmp_path, capsys):
    path = _csv(tmp_path, f"{HEADER}\n0,7,1,1,900,1100,0.5,48\n")
    assert cli.main(["compare", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("roll-agentic sim compare: error: trace") and "slo" in err and "\n" not in err
    assert cli.main(["compare", "--trace", str(tmp_path / "none.csv")]) == 2
    assert "cannot read trace" in capsys.readouterr().err


def test_a_csv_saved_by_excel_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_bytes(f"{HEADER}\n{GOOD_ROW}\n".encode("utf-8-sig"))
    assert len(trace_from_csv(path).jobs) == 1


@pytest.mark.parametrize(("doc", "says"), [
    ({"seed": 0, "workload": None, "jobs": []}, "'workload' must be an object"),
    ({"seed": "x", "workload": {}, "jobs": []}, "'seed' must be a whole number"),
    ({"seed": 0, "workload": {}, "jobs": []}, "'jobs' must be a non-empty list"),
    ({"seed": 0, "workload": {"slo_range": 5}, "jobs": [1]}, "bad 'workload'"),
])
def test_a_malformed_json_trace_is_one_line_not_a_traceback(tmp_path, capsys, doc, says):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["compare", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_flags_a_trace_file_would_ignore_are_refused(tmp_path, capsys):
    """--seed, --jobs and --arrival shape a generated trace: with --trace they were dropped silently."""
    for flags in (["--seed", "5"], ["--jobs", "9"], ["--arrival", "philly"]):
        assert cli.main(["compare", "--trace", str(EXAMPLE), *flags]) == 2
        assert f"{flags[0]} shapes a generated trace" in capsys.readouterr().err
    assert cli.main(["compare", "--jobs", "5", "--workers", "2"]) == 2
    assert "give --seeds too" in capsys.readouterr().err
    assert cli.main(["compare", "--jobs", "5", "--save-trace", str(tmp_path / "no" / "such" / "t.json")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_jobs_of_different_trainer_forms_never_share_a_training_node_in_any_policy(tmp_path):
    """A `form` column (a LoRA shape and base, "full"): every policy keeps jobs of different
    forms off each other's training nodes for the whole run, moves included; without it the
    same complementary jobs share."""
    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.compare import run_policies
    from roll_agentic.sim.options import RollMuxOptions

    rows = [f"{i * 0.1},7,1,1,{1400 if i % 2 else 500},{500 if i % 2 else 1400},2.0,12,{'AB'[i // 2 % 2]}"
            for i in range(8)]
    trace = trace_from_csv(_csv(tmp_path, f"{HEADER},form\n" + "\n".join(rows) + "\n"))
    form = {j.profile.job_id: j.profile.form for j in trace.jobs}
    assert sorted(form.values()) == ["A"] * 4 + ["B"] * 4
    spec = ClusterSpec(rollout_fifo=True)
    names = ("rollmux", "greedy", "random")

    def jobs_per_training_node(trace_, options):
        out: dict = {}
        for name, result in run_policies(trace_, spec, names, record=True, options=options).items():
            for p in result.phases:
                if p.pool == "train":
                    out.setdefault((name, p.node_id), set()).add(p.job_id)
        return out

    for options in (RollMuxOptions(), RollMuxOptions(rehome=True, share_any=True, scale_train=1)):
        seen = jobs_per_training_node(trace, options)
        assert {name for name, _ in seen} == set(names)
        assert all(len({form[j] for j in jobs}) == 1 for jobs in seen.values()), seen
        assert any(len(jobs) > 1 for (name, _), jobs in seen.items() if name == "rollmux")  # one form pairs
    anyform = replace(trace, jobs=[replace(j, profile=replace(j.profile, form="")) for j in trace.jobs])
    seen = jobs_per_training_node(anyform, RollMuxOptions())
    assert any(len({form[j] for j in jobs}) > 1 for (name, _), jobs in seen.items() if name == "rollmux")


def test_a_semicolon_separated_file_is_told_to_use_commas(tmp_path):
    with pytest.raises(ValueError, match="separate the columns with commas"):
        trace_from_csv(_csv(tmp_path, HEADER.replace(",", ";") + "\n" + GOOD_ROW.replace(",", ";") + "\n"))


def test_a_job_that_fits_no_node_is_named_by_its_csv_line(tmp_path):
    """Jobs are sorted by arrival; the problem names the file's line, not the sorted index."""
    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.trace import check_fits

    huge = "0,700,1,1,900,1100,1.3,48"  # 700 B parameters: 11 TB of trainer state on one node
    trace = trace_from_csv(_csv(tmp_path, f"{HEADER}\n5,7,1,1,900,1100,1.3,48\n{huge}\n"))
    assert trace.jobs[0].profile.job_id == "j0001"  # it arrives first
    with pytest.raises(ValueError, match=r"line 3 \(j0001\)") as err:
        check_fits(trace, ClusterSpec())
    # found after the file's own checks: the file is named, and what would make the job fit
    assert str(err.value).startswith(f"trace {tmp_path / 'jobs.csv'}: ")
    assert "give it more nodes (train_nodes, rollout_nodes)" in str(err.value)
    assert "host_mem_gb in a --cluster file" in str(err.value)


def test_every_job_of_a_json_trace_is_checked_at_once_and_named(tmp_path, capsys):
    """A JSON trace stopped at its first bad job: fixing a file took one run per problem."""
    saved = tmp_path / "t.json"
    assert cli.main(["compare", "--jobs", "3", "--save-trace", str(saved)]) == 0
    doc = json.loads(saved.read_text())
    doc["jobs"][0]["n_iters"] = -5
    del doc["jobs"][2]["arrival_s"]
    doc["jobs"][1]["profile"]["slo"] = 0.5
    saved.write_text(json.dumps(doc))
    capsys.readouterr()
    assert cli.main(["compare", "--trace", str(saved)]) == 2
    err = capsys.readouterr().err
    assert "3 problem(s)" in err
    for piece in ("job #0 (j0000): n_iters must be a whole number", "job #2 (j0002) has no 'arrival_s'",
                  "job #1 (j0001): slo must be a tolerated slowdown"):
        assert piece in err


def test_problems_name_the_files_own_line_when_blank_lines_come_before(tmp_path):
    """Blank lines are skipped as rows but count as lines: the problem named line 3 for line 5."""
    bad = GOOD_ROW.replace(",1.3,", ",0.3,")
    with pytest.raises(ValueError, match=r"line 5 \(j0001\): slo must be") as err:
        trace_from_csv(_csv(tmp_path, f"{HEADER}\n\n{GOOD_ROW}\n\n{bad}\n"))
    assert "line 3" not in str(err.value)
