"""A multiplexed job's `engine.*` settings are honoured per job or refused where it is loaded.

The shared rollout engines are built from the mux yaml: a job's engine.backend,
engine.max_batch, engine.max_model_len (and the vLLM settings) were silently ignored.
"""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from roll_agentic.cli import main
from roll_agentic.config import Config, EngineConfig
from roll_agentic.mux.job_engine_config import HOW, engine_problems, on_pool_engines
from roll_agentic.mux.mux_config import JobSpec, MuxConfig, range_problems

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
        "engine.gpu_memory_utilization=0.9 is not honoured per job: the shared engines take "
        "mux.gpu_memory_utilization (now 0.5); set it in the mux yaml, or drop engine.gpu_memory_utilization "
        "from the job",
        "engine.kv_cache_gib=4.0 is not honoured per job: the shared engines take mux.kv_cache_gib (now 1.0); "
        "set it in the mux yaml, or drop engine.kv_cache_gib from the job"]
    assert engine_problems(spec, cfg, MuxConfig(backend="hf")) == []
    # A job's backend `auto` (the default) takes the pool's, whatever it is.
    assert engine_problems(JobSpec("j"), EngineConfig(backend="auto"), MuxConfig(backend="vllm")) == []


def test_vllm_memory_settings_are_the_pools_and_a_job_asking_the_same_passes():
    m = MuxConfig(backend="vllm", kv_cache_gib=4.0, gpu_memory_utilization=0.9, enable_prefix_caching=False)
    spec = JobSpec("j", overrides=["engine.kv_cache_gib=4", "engine.enable_prefix_caching=false"])
    asked = EngineConfig(kv_cache_gib=4.0, enable_prefix_caching=False)
    assert engine_problems(spec, asked, m) == []
    # A job that sets none runs on, and records, what the shared engines were built with.
    cfg = on_pool_engines(JobSpec("j"), Config(), m)
    assert (cfg.engine.kv_cache_gib, cfg.engine.gpu_memory_utilization, cfg.engine.enable_prefix_caching) == (
        4.0, 0.9, False)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("kv_cache_gib", 0, "a number > 0 (GiB)"),
    ("kv_cache_gib", float("nan"), "a number > 0 (GiB)"),
    ("gpu_memory_utilization", 1.5, "a number in (0, 1]"),
])
def test_mux_memory_settings_out_of_range_are_named(key, value, expected):
    problems = range_problems(MuxConfig(**{key: value}))
    assert len(problems) == 1 and problems[0].startswith(key) and expected in problems[0], problems


def _submit_one_job(monkeypatch, tmp_path, override: str, settings: MuxConfig) -> tuple[int, list]:
    """`mux submit` of conf/mux/one_job.yaml plus `override`, to a stand-in multiplexer that runs
    on `settings`: the exit status, and what reached its `submit`."""
    submitted: list = []

    class Mux:
        class submit:  # noqa: N801 - stands for the actor method
            @staticmethod
            def remote(*args):
                submitted.append(args)

    monkeypatch.setattr("roll_agentic.mux.session.connect", lambda path: Mux())
    monkeypatch.setattr("roll_agentic.mux.cli.pool_settings", lambda mux: settings)
    job = yaml.safe_load(open("conf/mux/one_job.yaml"))
    job["overrides"].append(override)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return main(["mux", "submit", str(path), "--address-file", str(tmp_path / "none.json")]), submitted


def test_mux_submit_refuses_before_submitting(monkeypatch, tmp_path, capsys):
    rc, submitted = _submit_one_job(monkeypatch, tmp_path, "engine.max_model_len=1024",
                                    MuxConfig(backend="hf", max_model_len=512))
    assert rc == 2
    assert ("job guess_wide: engine.max_model_len=1024 exceeds the shared engines' context: set "
            "mux.max_model_len (now 512)") in capsys.readouterr().err
    assert not submitted


POOLS = "roll_heavy:pools=[{name:default},{name:fast,hardware:H20}]"


@pytest.mark.parametrize(("overrides", "wanted"), [
    ([POOLS], "job roll_heavy: pools=[default, fast] is not honoured per mux job"),
    ([POOLS, "roll_heavy:tasks.0.pool=fast"],
     "job roll_heavy: pools=[default, fast] and tasks.0.pool=fast are not honoured per mux job"),
])
def test_a_job_with_pools_of_its_own_stops_mux_run_naming_the_job(started, capsys, overrides, wanted):
    # Before, the multiplexer replaced them with its one pool (job_dirs.job_config) without a
    # word: a job set up for hardware-affine routing ran on the shared engines all the same.
    assert main(["mux", "run", CONF, *overrides, "--no-solo"]) == 2
    err = capsys.readouterr().err
    assert wanted in err and "\n" not in err.strip()
    assert ("its turns run on the multiplexer's shared engines (mux.* pool settings); remove pools and "
            "tasks[].pool from the job's config") in err
    assert not started


def test_pools_left_at_their_default_pass(started):
    assert main(["mux", "run", CONF, "roll_heavy:pools=[]", "roll_heavy:tasks.0.pool=default", "--no-solo"]) == 0
    cfg = {s.name: c for s, c in started[0]}
    assert cfg["roll_heavy"].pools == [] and cfg["roll_heavy"].tasks[0].pool == "default"


def test_mux_submit_refuses_pools_before_submitting(monkeypatch, tmp_path, capsys):
    rc, submitted = _submit_one_job(monkeypatch, tmp_path, "pools=[{name:default,hardware:H20,num_engines:2}]",
                                    MuxConfig(backend="hf"))
    assert rc == 2
    assert "job guess_wide: pools=[default] is not honoured per mux job" in capsys.readouterr().err
    assert not submitted
