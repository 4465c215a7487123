"""`mux run CONF KEY=VALUE...`: overrides for every job, checked before anything starts."""

from __future__ import annotations

from roll_agentic.cli import main


def test_overrides_reach_every_job_after_its_own(monkeypatch):
    seen = {}

    def fake_session(m, jobs, **kw):
        seen["jobs"] = jobs
        return {}

    monkeypatch.setattr("roll_agentic.mux.session.run_session", fake_session)
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "trainer.lora_rank=8", "trainer.lr=2e-2", "--no-solo"]) == 0
    jobs = seen["jobs"]
    assert [s.name for s, _ in jobs] == ["roll_heavy", "train_heavy"]
    for spec, cfg in jobs:
        assert spec.overrides[-2:] == ["trainer.lora_rank=8", "trainer.lr=2e-2"]
        assert cfg.trainer.lora_rank == 8 and cfg.trainer.lr == 2e-2  # the job's own lr=1e-2 is overridden


def test_a_bad_override_is_a_config_error_naming_it(monkeypatch, capsys):
    monkeypatch.setattr("roll_agentic.mux.session.run_session", lambda *a, **k: {})
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "trainer.lora_rank=-1"]) == 2
    assert "trainer.lora_rank" in capsys.readouterr().err
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "nonsense"]) == 2
    assert "write key=value" in capsys.readouterr().err


def test_a_resume_takes_the_runs_overrides_again(monkeypatch, tmp_path, capsys):
    import json

    import yaml

    conf = yaml.safe_load(open("conf/mux/two_tiny.yaml"))
    conf["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "mux.yaml"
    path.write_text(yaml.safe_dump(conf))
    run = tmp_path / "out" / "two_tiny-1"
    (run / "jobs").mkdir(parents=True)
    (run / "mux_run.json").write_text(json.dumps({"name": "two_tiny", "config": str(path),
                                                  "overrides": ["trainer.lora_rank=8"]}))
    seen = {}

    def fake_session(m, jobs, **kw):
        seen.update(kw, jobs=jobs)
        return {}

    monkeypatch.setattr("roll_agentic.mux.session.run_session", fake_session)
    assert main(["mux", "run", str(path), "--resume"]) == 0
    assert seen["run_name"] == "two_tiny-1" and seen["resume"] and seen["overrides"] == ("trainer.lora_rank=8",)
    assert all(cfg.trainer.lora_rank == 8 for _, cfg in seen["jobs"])
    assert "resuming with the run's overrides" in capsys.readouterr().err
    # Others given on the command line win.
    assert main(["mux", "run", str(path), "--resume", "trainer.lora_rank=4"]) == 0
    assert all(cfg.trainer.lora_rank == 4 for _, cfg in seen["jobs"])


def test_an_override_for_one_job_reaches_that_job_only_and_a_typo_is_refused(monkeypatch, capsys):
    """`JOB:KEY=VALUE`: LoRA jobs of two ranks (two trainer forms) from the shipped yaml."""
    seen = {}
    monkeypatch.setattr("roll_agentic.mux.session.run_session", lambda m, jobs, **kw: seen.update(jobs=jobs) or {})
    argv = ["mux", "run", "conf/mux/two_tiny.yaml", "trainer.lora_rank=4", "roll_heavy:trainer.lora_rank=8",
            "train_heavy:trainer.lr=3e-2", "--no-solo"]
    assert main(argv) == 0
    cfg = {s.name: c for s, c in seen["jobs"]}
    assert (cfg["roll_heavy"].trainer.lora_rank, cfg["train_heavy"].trainer.lora_rank) == (8, 4)
    assert (cfg["roll_heavy"].trainer.lr, cfg["train_heavy"].trainer.lr) == (1e-2, 3e-2)
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "roll_hevy:trainer.lora_rank=8"]) == 2
    assert "no job named 'roll_hevy' (jobs: roll_heavy, train_heavy)" in capsys.readouterr().err


def test_a_job_its_config_refuses_stops_mux_run_before_anything_starts(monkeypatch, capsys):
    """Before, `roll_heavy:algo=grpo` was refused in a status line while the other job trained."""
    started = []
    monkeypatch.setattr("roll_agentic.mux.session.run_session", lambda m, jobs, **kw: started.append(jobs))
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "roll_heavy:algo=grpo"]) == 2
    assert "job roll_heavy: algo.alpha must be 0" in capsys.readouterr().err
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "rollout.mode=tail_batching"]) == 2
    assert "job roll_heavy: rollout.mode must be async" in capsys.readouterr().err
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "train_heavy:rollout.mode=tail_batching"]) == 2
    assert "job train_heavy: trainer.ppo_epochs" in capsys.readouterr().err  # a config error names its job
    assert not started


def test_mux_run_exits_1_when_a_job_ended_refused_or_failed(monkeypatch, capsys):
    ended = {"roll_heavy": "refused", "train_heavy": "done"}
    monkeypatch.setattr("roll_agentic.mux.session.run_session",
                        lambda m, jobs, **kw: {"summary": {"job_state": ended}})
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "--no-solo"]) == 1
    assert "not every job finished: roll_heavy (refused)" in capsys.readouterr().err
    ended["roll_heavy"] = "done"
    assert main(["mux", "run", "conf/mux/two_tiny.yaml", "--no-solo"]) == 0


def test_the_shipped_submit_example_is_a_job_the_multiplexer_can_run():
    from roll_agentic.mux.cli import _load_jobs

    [(spec, cfg)] = _load_jobs("conf/mux/one_job.yaml")
    assert spec.name == "guess_wide" and spec.slo == 2.0 and cfg.algo.alpha == 0
