"""A multiplexed job's `engine.*` settings are honoured per job or refused where it is loaded.

The shared rollout engines are built from the mux yaml: a job's engine.backend,
engine.max_batch, engine.max_model_len (and the vLLM settings) were silently ignored.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from roll_agentic.cli import main
from roll_agentic.config import EngineConfig
from roll_agentic.mux.job_engine_config import HOW, engine_problems
from roll_agentic.mux.mux_config import JobSpec, MuxConfig

CONF = "conf/mux/two_tiny.yaml"  # backend: hf, max_batch and max_model_len at their defaults


@pytest.fixture
def started(monkeypatch) -> list:
    """The jobs `mux run` would have run (it starts nothing here)."""
    runs: list = []
    monkeypatch.setattr("roll_agentic.mux.session.run_session", lambda m, jobs, **kw: runs.append(jobs) or {})
    return runs


def test_every_engine_key_has_a_rule():
    """A new engine setting must say how the multiplexer treats it (else it is refused when set)."""
    assert set(HOW) == {f.name for f in dataclasses.fields(EngineConfig)}


@pytest.mark.parametrize(("override", "wanted"), [
    ("engine.max_model_len=2048", "job roll_heavy: engine.max_model_len=2048 exceeds the shared engines' context: "
                                  "set mux.max_model_len (now 1024)"),
    ("roll_heavy:engine.backend=vllm", "job roll_heavy: engine.backend=vllm is not honoured per job: the shared "
                                       "engines take mux.backend (now hf)"),
    ("train_heavy:engine=vllm", "job train_heavy: engine.backend=vllm is not honoured per job"),
    ("engine.max_batch=8", "job roll_heavy: engine.max_batch=8 is not honoured per job: the shared engines take "
                           "mux.max_batch (now 64)"),
    ("engine.num_engines=2", "engine.num_engines=2 is not honoured per job: the shared engines take "
                             "mux.engines_per_node (now 1)"),
])
def test_an_engine_setting_the_pool_cannot_honour_stops_mux_run_naming_job_key_and_mux_key(
        started, capsys, override, wanted):
    assert main(["mux", "run", CONF, override, "--no-solo"]) == 2
    err = capsys.readouterr().err
    assert wanted in err and "\n" not in err.strip()
    assert not started


def test_per_request_and_shorter_context_settings_are_honoured_per_job(started):
    argv = ["mux", "run", CONF, "roll_heavy:engine.temperature=0.7", "roll_heavy:engine.top_p=0.9",
            "roll_heavy:engine.max_model_len=512", "engine.sync_in_flight=keep",
            "engine.kv_cache_gib=4", "--no-solo"]  # a vLLM setting on an HF pool: a solo HF run ignores it too
    assert main(argv) == 0
    cfg = {s.name: c for s, c in started[0]}
    roll, train = cfg["roll_heavy"].engine, cfg["train_heavy"].engine
    assert (roll.temperature, roll.top_p, roll.max_model_len) == (0.7, 0.9, 512)
    assert (train.temperature, train.top_p, train.max_model_len) == (1.0, 1.0, 1024)
    assert roll.backend == train.backend == "hf"  # what the engines are, in the job's config.json


def test_a_job_that_sets_no_context_takes_the_pools(started, tmp_path):
    """Its workers must stop where the engines do: before, they went on to the job's 1024."""
    conf = yaml.safe_load(open(CONF))
    conf["max_model_len"] = 256
    path = tmp_path / "mux.yaml"
    path.write_text(yaml.safe_dump(conf))
    assert main(["mux", "run", str(path), "--no-solo"]) == 0
    assert all(cfg.engine.max_model_len == 256 for _, cfg in started[0])


def test_vllm_settings_are_refused_on_a_vllm_pool_and_every_problem_is_listed():
    spec = JobSpec("j", overrides=["engine.kv_cache_gib=4", "engine.gpu_memory_utilization=0.9"])
    cfg = EngineConfig(kv_cache_gib=4.0, gpu_memory_utilization=0.9)
    problems = engine_problems(spec, cfg, MuxConfig(backend="vllm"))
    assert problems == [
        "engine.gpu_memory_utilization=0.9 is not honoured per job: the shared vllm engines are built with its "
        "default (0.5) and no mux setting changes it; drop it from the job",
        "engine.kv_cache_gib=4.0 is not honoured per job: the shared vllm engines are built with its default "
        "(1.0) and no mux setting changes it; drop it from the job"]
    assert engine_problems(spec, cfg, MuxConfig(backend="hf")) == []
    # A job's backend `auto` (the default) takes the pool's, whatever it is.
    assert engine_problems(JobSpec("j"), EngineConfig(backend="auto"), MuxConfig(backend="vllm")) == []


def test_mux_submit_refuses_before_submitting(monkeypatch, tmp_path, capsys):
    submitted = []

    class Mux:
        class submit:  # noqa: N801 - stands for the actor method
            @staticmethod
            def remote(*args):
                submitted.append(args)

    monkeypatch.setattr("roll_agentic.mux.session.connect", lambda path: Mux())
    monkeypatch.setattr("roll_agentic.mux.cli.pool_settings", lambda mux: MuxConfig(backend="hf", max_model_len=512))
    job = yaml.safe_load(open("conf/mux/one_job.yaml"))
    job["overrides"].append("engine.max_model_len=1024")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["mux", "submit", str(path), "--address-file", str(tmp_path / "none.json")]) == 2
    assert ("job guess_wide: engine.max_model_len=1024 exceeds the shared engines' context: set "
            "mux.max_model_len (now 512)") in capsys.readouterr().err
    assert not submitted
