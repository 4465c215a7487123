"""A benchmark that fails still ends stdout with a JSON line: what failed, what it measured, exit 1.

Before, `bench engine` and `bench tail` waited for their rollout workers with
`ray.get(runs, timeout=...)`; a worker that never stopped raised
GetTimeoutError, and the run ended in a traceback with no JSON last line, so
whatever reads that line (a sweep, CI) read a traceback's last line instead.
"""

from __future__ import annotations

import json

import pytest
import ray
from ray.exceptions import GetTimeoutError

from roll_agentic.bench import engine, tail
from roll_agentic.bench.cli import report, standalone_main

BENCHES = [("engine", engine), ("tail", tail)]


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_report_of_a_failed_run_says_it_on_stderr_and_exits_1(capsys):
    assert report({"framework_runs": [1.0], "error": "the workers were stuck"}, True, "engine") == 1
    out, err = capsys.readouterr()
    assert _last_json(out)["error"] == "the workers were stuck"
    assert _last_json(out)["framework_runs"] == [1.0]  # partial figures are kept
    assert err == "bench engine: error: the workers were stuck\n"


def test_report_of_a_good_run_is_unchanged(capsys):
    assert report({"x": 1}, False, "engine") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split() == ["x", "1"] and "error" not in _last_json(out) and err == ""


@pytest.mark.parametrize("json_flag", [["--json"], []])
@pytest.mark.parametrize(("name", "module"), BENCHES)
def test_a_timeout_ends_in_one_error_line_a_json_last_line_and_exit_1(name, module, json_flag, monkeypatch, capsys):
    def timed_out(*_args, **_kwargs):
        raise GetTimeoutError("Get timed out: some object(s) not ready.")

    monkeypatch.setattr(module, "run", timed_out)
    code = standalone_main(name, module.add_parser, json_flag)
    out, err = capsys.readouterr()
    assert code == 1
    assert _last_json(out)["error"] == "GetTimeoutError: Get timed out: some object(s) not ready."
    assert err.splitlines() == [f"bench {name}: error: GetTimeoutError: Get timed out: some object(s) not ready."]


@pytest.mark.parametrize(("name", "module"), BENCHES)
def test_any_other_failure_ends_in_a_json_last_line_too_with_its_traceback_on_stderr(name, module, monkeypatch,
                                                                                   capsys):
    def broken(*_args, **_kwargs):
        raise RuntimeError("engine actor died\nwith a second line")

    monkeypatch.setattr(module, "run", broken)
    assert standalone_main(name, module.add_parser, ["--json"]) == 1
    out, err = capsys.readouterr()
    assert _last_json(out)["error"] == "RuntimeError: engine actor died with a second line"  # one line
    assert "Traceback" in err and err.splitlines()[-1].startswith(f"bench {name}: error: RuntimeError")


def test_argument_errors_still_exit_before_anything_runs(capsys):
    with pytest.raises(SystemExit, match="must be a multiple of --group-size"):
        standalone_main("engine", engine.add_parser, ["--episodes", "5", "--group-size", "4"])


def test_engine_figures_of_a_cut_short_run_use_complete_pairs_only():
    full = engine.figures([10.0, 12.0], [20.0, 30.0])
    assert full["framework_vs_raw_engine"] == 0.4 and full["paired_median_framework_vs_raw"] == 0.45
    cut = engine.figures([10.0, 12.0, 50.0], [20.0, 30.0])  # the third round's raw side never ran
    assert cut["framework_runs"] == [10.0, 12.0, 50.0] and cut["paired_median_framework_vs_raw"] == 0.45
    assert engine.figures([], []) == {"framework_runs": [], "raw_runs": []}
    assert engine.figures([10.0], []) == {"framework_runs": [10.0], "raw_runs": []}


@pytest.fixture
def workers_never_stop(monkeypatch):
    """ray.get of the workers' runs (the only wait with a timeout) times out, as with a stuck worker."""
    real_get = ray.get

    def get(refs, *args, timeout=None, **kwargs):
        if timeout is not None and isinstance(refs, list):
            raise GetTimeoutError("Get timed out: some object(s) not ready.")
        return real_get(refs, *args, timeout=timeout, **kwargs)

    monkeypatch.setattr(ray, "get", get)


@pytest.mark.slow
def test_engine_bench_that_times_out_keeps_its_measured_rounds(tiny_model_path, workers_never_stop):
    out = engine.run("hf", episodes=8, max_tokens=2, group_size=4, workers=1, repeats=2)
    assert "had not returned 60 s after they were told to stop" in out["error"]
    assert len(out["framework_runs"]) == len(out["raw_runs"]) == 2 and out["framework_vs_raw_engine"] > 0


@pytest.mark.slow
def test_tail_bench_that_times_out_names_the_schedule_and_keeps_its_steps(tiny_model_path, workers_never_stop):
    out = tail.run("hf", prompts=2, responses=2, steps=2, eta=1.5, workers=1, env_step_s=0.001)
    assert out["error"].startswith("the sync schedule's rollout workers had not returned 120 s")
    assert len(out["sync_step_s"]) == 2 and "tail_step_s" not in out and "tail_batching_speedup" not in out
