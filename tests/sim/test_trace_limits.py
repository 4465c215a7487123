"""A trace file holds at most as many jobs as `sim compare --jobs` allows.

Before, a `--trace` file had no limit on its job count: each job was read
and checked, then every policy simulated them all, and a file of millions
of jobs ran for hours without a word. Now the count is checked first (in a
JSON file, before any job is read), in one line naming the file and the count.
"""

import json

import pytest

from roll_agentic.sim import cli, trace
from roll_agentic.sim.trace import MAX_TRACE_JOBS, Trace, WorkloadSpec, generate_trace
from roll_agentic.sim.trace_csv import REQUIRED

GOOD_ROW = "0,7,1,1,900,1100,1.3,48"  # a CSV job (tests/sim/test_trace_csv.py's)


def _json_trace(tmp_path, n_jobs: int, name: str = "trace.json"):
    """A JSON trace of `n_jobs` copies of one generated job, each with its own id."""
    small = tmp_path / "one.json"
    generate_trace(3, WorkloadSpec(n_jobs=1)).save(small)
    doc = json.loads(small.read_text())
    job = doc["jobs"][0]
    doc["jobs"] = [{**job, "profile": {**job["profile"], "job_id": f"j{i}"}} for i in range(n_jobs)]
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_the_limit_is_the_one_of_jobs():
    assert MAX_TRACE_JOBS == cli.MAX_JOBS == 5_000


def test_a_json_trace_past_the_limit_is_refused_naming_the_file_and_its_count(tmp_path):
    path = _json_trace(tmp_path, MAX_TRACE_JOBS + 1)
    with pytest.raises(ValueError, match=f"has {MAX_TRACE_JOBS + 1} jobs, more than {MAX_TRACE_JOBS}") as err:
        Trace.load(path)
    assert str(err.value).startswith(f"trace {path} has ") and "Split it" in str(err.value)
    assert len(Trace.load(_json_trace(tmp_path, MAX_TRACE_JOBS, "limit.json")).jobs) == MAX_TRACE_JOBS


def test_the_count_is_checked_before_any_job_is_read(tmp_path):
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"seed": 0, "workload": {}, "jobs": [0] * 3_000_000}))
    with pytest.raises(ValueError, match=f"has 3000000 jobs, more than {MAX_TRACE_JOBS}"):
        Trace.load(path)  # not "job #0 must be an object"


def test_a_csv_trace_past_the_limit_is_refused_too(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([",".join(REQUIRED), *[GOOD_ROW] * (MAX_TRACE_JOBS + 1)]) + "\n")
    with pytest.raises(ValueError, match=f"trace {path} has {MAX_TRACE_JOBS + 1} jobs, more than"):
        Trace.load(path)


@pytest.mark.parametrize("command", ["compare", "repack"])
def test_the_cli_refuses_it_in_one_line_before_anything_runs(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(trace, "MAX_TRACE_JOBS", 3)  # a small trace stands for a large one
    path = _json_trace(tmp_path, 4)
    assert cli.main([command, "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"roll-agentic sim {command}: error: trace {path} has 4 jobs, more than 3 ")
    assert err.count("\n") == 1
