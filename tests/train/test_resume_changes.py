"""Resuming a run: what a checkpoint brings back, and what the resume's own settings change."""

import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.resume_record import config_json
from roll_agentic.train.trainer import PolicyTrainer, Sample


def _batch(seed: int, n: int = 4) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(5, 300, (10,), generator=g).tolist()
        out.append(Sample(ids, [0] * 5 + [1] * 5, [0.0] * 5 + (-torch.rand(5, generator=g) * 6).tolist(),
                          advantage=1.0 if i % 2 else -1.0))
    return out


def test_a_resume_with_another_weight_decay_trains_with_it(tiny_model_path, tmp_path):
    """The resume prints `trainer.weight_decay: 0.0 -> 0.1`; the optimizer's saved param groups
    used to overwrite it with the run's 0.0, so the new setting never acted."""
    first = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, weight_decay=0.0), AlgoConfig())
    first.train_step(_batch(0))
    save_checkpoint(tmp_path, first.step, first.engine_state_dict(), first.state(), {"buffer": {}})

    resumed = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, weight_decay=0.1), AlgoConfig())
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    resumed.load_state(state, weights)
    assert all(g["weight_decay"] == 0.1 for g in resumed.optimizer.param_groups)
    # and the optimizer's moments did come back
    assert resumed.optimizer.state and all(int(s["step"]) == 1 for s in resumed.optimizer.state.values())


def test_a_resume_that_turns_the_target_kl_off_trains_at_the_schedules_rate(tiny_model_path, tmp_path):
    """A run with algo.target_kl shrank its rate (lr_mult < 1); resumed with target_kl=0 (off),
    the saved multiplier was restored and, never adapted again, cut every later step's rate."""
    first = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2), AlgoConfig(target_kl=0.01))
    first.trust.mult = 0.25  # as after overshooting steps
    save_checkpoint(tmp_path, 1, first.engine_state_dict(), first.state(), {"buffer": {}})

    off = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, lr_schedule="constant"), AlgoConfig(target_kl=0.0))
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    off.load_state(state, weights)
    assert off.train_step(_batch(1))["train/lr"] == 1e-2

    on = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, lr_schedule="constant"), AlgoConfig(target_kl=0.01))
    on.load_state(state, weights)  # still on: the run's multiplier goes on
    assert on.train_step(_batch(1))["train/lr"] == 1e-2 * 0.25


def test_resuming_a_finished_run_says_so_without_starting_anything(tmp_path, capsys, monkeypatch):
    import json

    from roll_agentic.hydra_config import load_config
    from roll_agentic.train import job as job_mod

    run = tmp_path / "done"
    save_checkpoint(run / "checkpoints", 4, {"x": torch.ones(1)}, {"step": 4}, {"buffer": {}})
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 5)))
    (run / "config.json").write_text("{}")

    def no_start(self):
        raise AssertionError("a finished run started Ray and its engines")

    monkeypatch.setattr(job_mod.TrainingJob, "start", no_start)
    for total in (4, 3):
        cfg = load_config([f"output_dir={tmp_path}", "run_name=done", "engine=hf", "trainer.resume=true",
                           f"trainer.total_steps={total}"])
        out = job_mod.TrainingJob(cfg).run()
        assert out["steps"] == 4 and [r["step"] for r in out["metrics"]] == [1, 2, 3, 4]
        assert f"at step 4 of trainer.total_steps={total}: nothing to train" in capsys.readouterr().out
    assert (run / "config.json").read_text() == "{}"  # the run's settings are left as they were


def _resume_at(tmp_path, overrides: list[str]):
    """What `run()` does about the settings at a resume: say what changed, then save its own."""
    from dataclasses import asdict

    from roll_agentic.hydra_config import load_config
    from roll_agentic.train import job as job_mod

    cfg = load_config([f"output_dir={tmp_path}", "run_name=r", "engine=hf", "trainer.resume=true", *overrides])
    job = job_mod.TrainingJob(cfg)
    job.version = 2  # as _maybe_resume sets it
    job._say_what_resume_changed()
    (job.run_dir / "config.json").write_text(config_json(asdict(job.cfg)))
    return job.run_dir


def test_two_resumes_at_one_step_keep_the_runs_own_settings(tmp_path, capsys):
    """Resumed twice at step 2 with other overrides each time, the second resume wrote the first
    resume's settings over config.before_step_2.json: the run's own settings were lost."""
    import json
    from dataclasses import asdict

    from roll_agentic.hydra_config import load_config

    run = tmp_path / "r"
    save_checkpoint(run / "checkpoints", 2, {"x": torch.ones(1)}, {"step": 2}, {"buffer": {}})
    original = load_config([f"output_dir={tmp_path}", "run_name=r", "engine=hf", "trainer.total_steps=20"])
    (run / "config.json").write_text(config_json(asdict(original)))

    _resume_at(tmp_path, ["trainer.total_steps=30"])
    _resume_at(tmp_path, ["trainer.total_steps=40"])
    out = capsys.readouterr().out
    assert "trainer.total_steps: 20 -> 30" in out and "trainer.total_steps: 30 -> 40" in out
    first, second = run / "config.before_step_2.json", run / "config.before_step_2.2.json"
    assert json.loads(first.read_text())["trainer"]["total_steps"] == 20  # the run's own, kept
    assert json.loads(second.read_text())["trainer"]["total_steps"] == 30
    assert json.loads((run / "config.json").read_text())["trainer"]["total_steps"] == 40
    _resume_at(tmp_path, ["trainer.total_steps=40"])  # nothing changed: no copy
    assert {p.name for p in run.glob("config.before_step_*")} == {first.name, second.name}


def test_a_resume_with_another_total_steps_says_how_the_rate_moves(tmp_path, capsys):
    """A cosine schedule over trainer.total_steps: resumed with more steps, the next step's
    rate jumped (0.0005 -> 0.00093) with nothing said. Allowed, but said in one line."""
    from dataclasses import asdict

    from roll_agentic.hydra_config import load_config
    from roll_agentic.train import job as job_mod
    from roll_agentic.train.lr_schedule import lr_at

    run = tmp_path / "r"
    save_checkpoint(run / "checkpoints", 10, {"x": torch.ones(1)}, {"step": 10}, {"buffer": {}})
    base = [f"output_dir={tmp_path}", "run_name=r", "engine=hf", "trainer.lr=0.001", "trainer.lr_min_ratio=0"]
    (run / "config.json").write_text(config_json(asdict(load_config([*base, "trainer.total_steps=20"]))))

    def resume(*overrides: str) -> list[str]:
        job = job_mod.TrainingJob(load_config([*base, "trainer.resume=true", *overrides]))
        job.version = 10  # as _maybe_resume sets it, before it says what the schedule does
        job._say_what_the_schedule_does()
        return [line for line in capsys.readouterr().out.splitlines() if "learning rate" in line]

    was, now = lr_at(10, 1e-3, 20, "cosine"), lr_at(10, 1e-3, 80, "cosine")
    assert resume("trainer.total_steps=80") == [
        f"learning rate at step 11: {was:.3g} -> {now:.3g}, because the cosine schedule now runs over 80 steps "
        "(trainer.total_steps was 20)"]
    assert f"{was:.3g}" == "0.000459" and f"{now:.3g}" == "0.000961"
    assert resume("trainer.total_steps=20") == []  # the run's own: nothing moves
    # A new lr as well: both causes are named (the lr's was put down to total_steps)
    both = lr_at(10, 5e-4, 80, "cosine")
    assert resume("trainer.total_steps=80", "trainer.lr=5e-4") == [
        f"learning rate at step 11: {was:.3g} -> {both:.3g}, because the cosine schedule now runs over 80 steps "
        "(trainer.total_steps was 20), and trainer.lr is now 0.0005 (was 0.001)"]
    # at the schedule's floor under either total, only the lr moves the rate: nothing said here
    # (the new lr is listed with the resume's other settings)
    (run / "config.json").write_text(config_json(asdict(load_config([*base, "trainer.total_steps=10"]))))
    assert resume("trainer.total_steps=11", "trainer.lr=5e-4") == []  # step 11 is the last of 11
    (run / "config.json").write_text(config_json(asdict(load_config([*base, "trainer.total_steps=20"]))))
    assert resume("trainer.total_steps=80", "trainer.lr_schedule=constant") == [
        "learning rate at step 11: 0.000459 -> 0.001, because the schedule is now constant over 80 steps "
        "(was cosine over 20)"]
    (run / "config.json").write_text(config_json(asdict(load_config(
        [*base, "trainer.total_steps=20", "trainer.lr_schedule=constant"]))))
    assert resume("trainer.total_steps=80", "trainer.lr_schedule=constant") == []  # constant: no jump


def test_a_resume_with_other_tasks_than_the_runs_is_refused_naming_both():
    """A run started from --config my.yaml and resumed with a bare trainer.resume=true
    went on with the default tasks, training steps of tasks the run never had."""
    from roll_agentic.hydra_config import load_config
    from roll_agentic.train.resume_record import flat_settings, task_mismatch

    mine = ["tasks=[{name:cliff,env_id:CliffWalking-v1,max_turns:20,format_penalty:2},"
            "{name:guess,env_id:envs.guess_number:GuessNumber}]"]
    run = flat_settings(load_config(mine))
    assert task_mismatch(run, flat_settings(load_config([*mine, "trainer.total_steps=9"]))) is None
    reweighted = mine[0].replace("format_penalty:2}", "format_penalty:2,weight:3}")
    assert task_mismatch(run, flat_settings(load_config([reweighted]))) is None  # same tasks, other shares
    swapped = ["tasks=[{name:guess,env_id:envs.guess_number:GuessNumber},"
               "{name:cliff,env_id:CliffWalking-v1,max_turns:20,format_penalty:2}]"]
    assert task_mismatch(run, flat_settings(load_config(swapped))) is None  # the same tasks, reordered
    says = task_mismatch(run, flat_settings(load_config([])))
    assert says.startswith("this run trained tasks cliff, guess; this command line has frozenlake, guess")
    assert "--config FILE" in says


def test_resume_other_tasks_without_a_resume_is_refused():
    import pytest

    from roll_agentic.config import ConfigError
    from roll_agentic.hydra_config import load_config

    with pytest.raises(ConfigError, match=r"trainer.resume_other_tasks: expected false unless trainer.resume=true"):
        load_config(["trainer.resume_other_tasks=true"])


def test_a_step_0_checkpoint_is_checked_against_the_run_like_any_other(tmp_path):
    """A SIGTERM in the first rollout saves step 0 (untrained); its resume on other tasks went
    ahead, and dropped the saved prompts of the run's own tasks without a word."""
    from dataclasses import asdict

    import pytest

    from roll_agentic.hydra_config import load_config
    from roll_agentic.train.job import TrainingJob

    run = tmp_path / "r"
    save_checkpoint(run / "checkpoints", 0, {"x": torch.ones(1)}, {"step": 0}, {"buffer": {}})
    mine = "tasks=[{name:cliff,env_id:CliffWalking-v1},{name:guess,env_id:envs.guess_number:GuessNumber}]"
    (run / "config.json").write_text(config_json(asdict(load_config([f"output_dir={tmp_path}", "run_name=r", mine]))))
    job = TrainingJob(load_config([f"output_dir={tmp_path}", "run_name=r", "trainer.resume=true"]))
    with pytest.raises(ValueError, match="this run trained tasks cliff, guess; this command line has frozenlake"):
        job._check_resume_matches_run()
