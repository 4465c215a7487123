"""A benchmark that fails still ends stdout with a JSON line: what failed, what it measured, exit 1.

Before, `bench engine` and `bench tail` waited for their rollout workers with
`ray.get(runs, timeout=...)`; a worker that never stopped raised
GetTimeoutError, and the run ended in a traceback with no JSON last line, so
whatever reads that line (a sweep, CI) read a traceback's last line instead.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

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


# A stuck actor mid-run. Before, only the final wait (the workers' runs after stop) had a
# timeout: a rollout worker, buffer or engine that never answered a round's wait hung the
# benchmark for ever. Ray and the actors are faked here, so the tests run in a moment.

class _Ref:
    def __init__(self, method: str):
        self.method = method


class _Actor:
    def __getattr__(self, method: str):
        return SimpleNamespace(remote=lambda *_args, **_kwargs: _Ref(method))


class _ActorClass:
    def remote(self, *_args, **_kwargs):
        return _Actor()


@pytest.fixture
def stuck_at(monkeypatch, tmp_path):
    """`stuck_at(method, nth)`: fake Ray in which the nth wait on `method` never returns.

    That wait raises GetTimeoutError if it has a timeout and fails the test if it
    has none (it would wait for ever); returns the (method, timeout) of every wait.
    """
    import transformers

    import roll_agentic.cluster
    import roll_agentic.engine.host
    import roll_agentic.model.tiny
    import roll_agentic.rollout.conversation

    waits: list[tuple[str, float | None]] = []
    killed: list = []
    answers = {
        "get_batch": lambda: [[SimpleNamespace(loss_mask=[1] * 4, seed=i, num_turns=1 + i) for i in range(2)]],
        "raw_tokens_per_s": lambda: 100.0,
        "metrics": lambda: {"tail/rounds_short": 1.0, "tail/rounds_long": 1.0, "tail/aborted_prompts": 0.0,
                            "tail/long_queue": 0.0},
    }
    monkeypatch.setattr(roll_agentic.cluster, "init_ray", lambda _cfg: False)  # a Ray the run did not start
    monkeypatch.setattr(roll_agentic.engine.host, "engine_actor_class", lambda **_kwargs: _ActorClass())
    monkeypatch.setattr(roll_agentic.model.tiny, "ensure_tiny_model", lambda _path: tmp_path)
    monkeypatch.setattr(transformers, "AutoTokenizer", SimpleNamespace(from_pretrained=lambda _path: None))
    monkeypatch.setattr(roll_agentic.rollout.conversation, "chat_format_for", lambda _tok: SimpleNamespace(
        stop_token_ids=[0], observation_tokens=lambda _obs, **_kwargs: [1, 2]))
    monkeypatch.setattr(ray, "remote", lambda **_kwargs: lambda _cls: _ActorClass())
    monkeypatch.setattr(ray, "kill", killed.append)

    def arm(method: str, nth: int) -> list[tuple[str, float | None]]:
        def get(ref, *, timeout=None):
            if isinstance(ref, list):  # the workers' runs, after stop: they return
                return [None] * len(ref)
            waits.append((ref.method, timeout))
            if ref.method == method and sum(m == method for m, _ in waits) == nth:
                if timeout is None:
                    pytest.fail(f"the wait on {method} has no timeout: a stuck actor hangs the run for ever")
                raise GetTimeoutError("Get timed out: some object(s) not ready.")
            return answers.get(ref.method, lambda: None)()

        monkeypatch.setattr(ray, "get", get)
        return waits

    arm.killed = killed
    return arm


@pytest.mark.parametrize(("method", "nth", "what", "rounds"), [
    ("get_batch", 4, "round 2's framework batch", 1),  # two warm-up batches, then round 1's
    ("raw_tokens_per_s", 3, "round 3's raw engine run", 2),
    ("ping", 1, "the engine's start", 0),
])
def test_engine_bench_with_an_actor_stuck_mid_run_ends_in_its_json_error(stuck_at, method, nth, what, rounds,
                                                                         capsys):
    waits = stuck_at(method, nth)
    assert standalone_main("engine", engine.add_parser, ["--backend", "hf", "--episodes", "2", "--group-size", "2",
                                                         "--workers", "1", "--repeats", "4", "--json"]) == 1
    out, err = capsys.readouterr()
    result = _last_json(out)
    limit = engine.ENGINE_START_TIMEOUT_S if method == "ping" else engine.ROUND_TIMEOUT_S
    assert result["error"].startswith(f"{what} had not returned after {limit:g} s (ray.get timed out), so an actor")
    assert f"the {rounds} rounds measured before are kept" in result["error"]
    assert len(result["raw_runs"]) == rounds and err == f"bench engine: error: {result['error']}\n"
    assert all(timeout is not None for _, timeout in waits)  # every wait has its limit
    assert stuck_at.killed  # the actors of a Ray the run did not start are ended


def test_tail_bench_with_an_actor_stuck_mid_step_names_the_schedule_and_keeps_its_steps(stuck_at, capsys):
    waits = stuck_at("get_batch", 3)  # the sync schedule's warm-up, step 1, then step 2
    assert standalone_main("tail", tail.add_parser, ["--backend", "hf", "--prompts", "1", "--responses", "2",
                                                     "--steps", "3", "--workers", "1", "--json"]) == 1
    result = _last_json(capsys.readouterr().out)
    assert result["error"].startswith(f"in the sync schedule, step 2's batch had not returned after "
                                      f"{tail.STEP_TIMEOUT_S:g} s (ray.get timed out), so an actor")
    assert len(result["sync_step_s"]) == 1 and "tail_step_s" not in result
    assert ("get_batch", tail.STEP_TIMEOUT_S) in waits and all(timeout is not None for _, timeout in waits)
    assert len(stuck_at.killed) == 4  # the schedule's worker, buffer and router, then the engine
