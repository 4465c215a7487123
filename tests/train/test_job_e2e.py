"""End to end: a few real training steps through Ray actors, then a resume."""

import json
from pathlib import Path

import pytest

from roll_agentic.hydra_config import load_config
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint
from roll_agentic.train.job import TrainingJob
from roll_agentic.train.termination import SigtermAsInterrupt

pytestmark = pytest.mark.slow


def _cfg(tmp_path, *extra):
    return load_config([
        f"output_dir={tmp_path}", "run_name=e2e", "engine=hf", "trainer.total_steps=3",
        "algo.groups_per_step=2", "tasks.0.group_size=4", "tasks.1.group_size=4",
        "rollout.num_workers=1", "rollout.groups_in_flight=2", "telemetry.progress=false",
        "trainer.save_every=2", *extra])


def test_train_writes_metrics_tensorboard_plot_and_checkpoints_then_resumes(tmp_path, tiny_model_path, capsys):
    result = TrainingJob(_cfg(tmp_path)).run()
    run = tmp_path / "e2e"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["reward/frozenlake/mean"] is not None and r["reward/guess/mean"] is not None
        assert 0.0 <= r["reward/frozenlake/mean"] <= 1.0
        assert r["train/tokens"] > 0
        assert r["rollout/staleness_max"] <= 1  # alpha = 1
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run / "checkpoints" / "latest").read_text() == "step_000003"
    assert result["steps"] == 3

    capsys.readouterr()
    resumed = TrainingJob(_cfg(tmp_path, "trainer.total_steps=5", "trainer.resume=true")).run()
    # what the resume changed is said, and the run's own settings are kept beside the new ones
    assert "resuming with 1 setting(s) other than the run's" in capsys.readouterr().out
    assert json.loads((run / "config.before_step_3.json").read_text())["trainer"]["total_steps"] == 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert resumed["steps"] == 5
    assert (run / "checkpoints" / "latest").read_text() == "step_000005"

    # The policy taken away: its last step as a Hugging Face model (`roll-agentic model export`),
    # from the model the run recorded it started from.
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from roll_agentic.model.export import export_checkpoint

    done = export_checkpoint(run, tmp_path / "policy")
    assert done.step == 5 and done.base == Path(tiny_model_path).resolve()
    state = AutoModelForCausalLM.from_pretrained(tmp_path / "policy").state_dict()
    trained = load_file(run / "checkpoints" / "step_000005" / "weights.safetensors")
    assert all(torch.equal(state[k], v) for k, v in trained.items())


def test_synchronous_mode_trains_only_on_policy_samples(tmp_path, tiny_model_path):
    # evaluated after steps 2 and 3 (the last), on 3 held-out episodes per task
    TrainingJob(_cfg(tmp_path, "algo.alpha=0", "trainer.total_steps=3", "eval.every=2", "eval.episodes=3")).run()
    rows = [json.loads(line) for line in (tmp_path / "e2e" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rollout/staleness_max"] == 0 for r in rows)
    # every sampled token came from the weights being trained: the recomputed logprobs agree
    assert all(r["train/logprob_diff"] < 1e-3 for r in rows)
    assert [("eval/guess/episodes" in r) for r in rows] == [False, True, True]
    for r in rows[1:]:
        for task in ("frozenlake", "guess"):
            assert r[f"eval/{task}/episodes"] + r[f"eval/{task}/failed"] == 3
            assert 0.0 <= r[f"eval/{task}/mean"] <= 1.0 and r[f"eval/{task}/turns"] >= 1
    # eval episodes are never trained on: each step trains its 2 groups of 4
    assert all(r["train/samples"] == 8 for r in rows)


def test_tail_batching_mode_streams_gradients_on_policy(tmp_path, tiny_model_path):
    TrainingJob(_cfg(tmp_path, "rollout.mode=tail_batching", "algo.alpha=0", "trainer.total_steps=3")).run()
    rows = [json.loads(line) for line in (tmp_path / "e2e" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    filled = 0.0
    for r in rows:
        assert r["rollout/staleness_max"] == 0  # every sample from the weights it trains
        assert r["train/logprob_diff"] < 1e-3
        assert r["tail/rounds_short"] + r["tail/rounds_long"] >= r["step"]
        fill, filled = r["tail/fill_prompts"] - filled, r["tail/fill_prompts"]
        # P0 groups (and a long round's fill prompts) x R0 responses, nothing more
        assert r["train/samples"] == (2 + fill) * 4
        if r["tail/round_is_long"]:  # P0 = 2 defers a prompt per short round: step 3 is long
            assert r["reward/frozenlake/mean"] is not None and r["reward/guess/mean"] is not None


def test_ctrl_c_during_an_update_finishes_the_step_logs_it_and_saves_it(tmp_path, tiny_model_path, monkeypatch):
    """Before, the held interrupt was raised before the step's metrics were written: the log
    skipped that step for good (1, 2, 3, 4, 6, ... after a resume)."""
    import os
    import signal

    real_train_phase = TrainingJob.train_phase

    def interrupted_train_phase(self, groups):
        if self.version == 1:  # during step 2's update
            os.kill(os.getpid(), signal.SIGINT)
        return real_train_phase(self, groups)

    monkeypatch.setattr(TrainingJob, "train_phase", interrupted_train_phase)
    result = TrainingJob(_cfg(tmp_path, "trainer.total_steps=4")).run()
    rows = [json.loads(line) for line in (tmp_path / "e2e" / "metrics.jsonl").read_text().splitlines()]
    assert result["interrupted"] and result["steps"] == 2
    assert [r["step"] for r in rows] == [1, 2]
    assert (tmp_path / "e2e" / "checkpoints" / "latest").read_text() == "step_000002"


def test_sigterm_between_updates_saves_a_checkpoint_and_stops(tmp_path, tiny_model_path, monkeypatch):
    """A scheduler's SIGTERM (preemption, a time limit) met Ray's handler, which exits at once:
    the steps since the last checkpoint were lost and the actors' tracebacks filled the log."""
    import os
    import signal

    real_rollout_phase = TrainingJob.rollout_phase

    def terminated_rollout_phase(self):
        if self.version == 1:  # during step 2's rollout, outside any update
            os.kill(os.getpid(), signal.SIGTERM)
        return real_rollout_phase(self)

    monkeypatch.setattr(TrainingJob, "rollout_phase", terminated_rollout_phase)
    result = TrainingJob(_cfg(tmp_path, "trainer.total_steps=4")).run()  # save_every=2: step 1 saved by the stop
    assert result["interrupted"] and result["terminated"] and result["steps"] == 1
    assert (tmp_path / "e2e" / "checkpoints" / "latest").read_text() == "step_000001"
    handler = signal.getsignal(signal.SIGTERM)  # Ray's (or the default) is back
    assert not isinstance(getattr(handler, "__self__", None), SigtermAsInterrupt)


def test_a_sigterm_just_after_start_up_still_closes_the_runs_actors(tmp_path, tiny_model_path, monkeypatch,
                                                                      capsys):
    """Between start-up and the training loop a SIGTERM went past every handler of the run's:
    its engines, workers and emulator were left to Ray's exit. And the stop's checkpoint,
    when it failed (a full disk), failed in silence."""
    import os
    import signal

    closed = []
    real_close = TrainingJob.close

    def terminated_at_once(self):
        os.kill(os.getpid(), signal.SIGTERM)

    def noted_close(self, graceful=True):
        closed.append(graceful)
        real_close(self, graceful)

    monkeypatch.setattr(TrainingJob, "_say_what_resume_changed", terminated_at_once)
    def full_disk(self, untrained=False):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TrainingJob, "close", noted_close)
    monkeypatch.setattr(TrainingJob, "checkpoint", full_disk)
    result = TrainingJob(_cfg(tmp_path)).run()
    assert result["interrupted"] and result["terminated"] and result["steps"] == 0
    assert closed == [True]
    assert ("checkpoint failed (OSError: [Errno 28] No space left on device): no checkpoint stands: a resume "
            "starts over") in capsys.readouterr().out


def test_an_error_between_steps_saves_the_steps_since_the_last_checkpoint(tmp_path, tiny_model_path, monkeypatch):
    """A dead worker or every group failing stopped the run with up to save_every - 1 trained
    steps unsaved, while the error said to resume from the last checkpoint."""
    real_rollout_phase = TrainingJob.rollout_phase

    def failing_rollout_phase(self):
        if self.version == 1:  # step 2's rollout: step 1 is trained, save_every=2 saved nothing yet
            raise RuntimeError("rollout worker 0 stopped during the rollout")
        return real_rollout_phase(self)

    monkeypatch.setattr(TrainingJob, "rollout_phase", failing_rollout_phase)
    with pytest.raises(RuntimeError, match="rollout worker 0 stopped"):
        TrainingJob(_cfg(tmp_path, "trainer.total_steps=4")).run()
    assert (tmp_path / "e2e" / "checkpoints" / "latest").read_text() == "step_000001"


def test_a_rollout_worker_that_dies_stops_the_run_with_its_name_instead_of_a_silent_wait(tmp_path, tiny_model_path):
    import ray

    job = TrainingJob(_cfg(tmp_path))
    job.start()
    try:
        ray.kill(job.workers[0])  # as an OOM kill or a crash would
        with pytest.raises(RuntimeError, match=r"rollout worker 0 stopped during the rollout \(.*Actor.*\)"):
            job.step_once()
    finally:
        job.close(graceful=False)


def _say_what_resume_changed(run_dir, resume_overrides: list[str]) -> None:
    """What a resume with `resume_overrides` says of a run saved with engine=hf and 3 steps."""
    from dataclasses import asdict

    from roll_agentic.train.resume_record import config_json

    fresh = load_config(["engine=hf", "trainer.total_steps=3"])
    (run_dir / "config.json").write_text(config_json(asdict(fresh)))
    job = TrainingJob.__new__(TrainingJob)
    job.cfg = load_config([*resume_overrides, "trainer.resume=true", "run_name=x"])
    job.run_dir, job.version = run_dir, 3
    job._say_what_resume_changed()


def test_a_resume_by_run_name_does_not_list_the_name_as_a_changed_setting(tmp_path, capsys):
    """A fresh run saves run_name "" (named at its start): `trainer.resume=true run_name=X`
    listed `run_name: '' -> 'X'` among the settings that differ, and saved a config for it."""
    _say_what_resume_changed(tmp_path, ["engine=hf", "trainer.total_steps=3"])
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "config.before_step_3.json").exists()


def test_the_settings_a_resume_changes_are_listed_one_per_line(tmp_path, capsys):
    """On one line, a changed task list ran hundreds of characters long."""
    _say_what_resume_changed(tmp_path, ["trainer.total_steps=5", "trainer.lr=1e-5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("resuming with ") and lines[0].endswith("(repeat the run's overrides to keep them):")
    assert "  trainer.total_steps: 3 -> 5" in lines and "  trainer.lr: 0.005 -> 1e-05" in lines and "  engine.backend: 'hf' -> 'auto'" in lines
    assert all(line.startswith("  ") for line in lines[1:])


def test_a_reward_that_raises_on_every_episode_stops_the_run_at_once_naming_the_file(tmp_path, tiny_model_path):
    """A bug of the task's own code recurs on every re-roll: the run stops after the first
    16 groups, all failed so, naming the file to fix, instead of re-rolling for
    rollout.max_failing_s (set to an hour here: the message says which stop it took)."""
    from roll_agentic.train.job import train

    task = ('tasks=[{name:guess,env_id:"envs.guess_number:GuessNumber",env_kwargs:{low:1,high:8},max_turns:2,'
            'reward:tests.train.reward_failing_on_real_episodes,group_size:4,max_new_tokens:4}]')
    cfg = load_config([f"output_dir={tmp_path}", "run_name=bug", "engine=hf", "reward=local", "trainer.total_steps=3",
                       "algo.groups_per_step=2", "rollout.num_workers=1", "rollout.groups_in_flight=4",
                       "rollout.max_failing_s=3600", "telemetry.progress=false", task])
    with pytest.raises(RuntimeError) as info:
        train(cfg)
    message = str(info.value)
    assert "every episode of the last 16 groups failed" in message, message
    assert "KeyError: 'answer'" in message and "the run stops now" in message, message
    assert "Fix tests/train/reward_failing_on_real_episodes.py" in message, message
    assert not (tmp_path / "bug" / "checkpoints" / "latest").exists()  # no step was taken


def test_a_resume_on_other_tasks_goes_on_only_when_asked(tmp_path, tiny_model_path):
    """A curriculum: the run's model and optimizer go on to other tasks with
    trainer.resume_other_tasks=true; without it the resume is refused before anything starts."""
    run = tmp_path / "e2e"
    TrainingJob(_cfg(tmp_path, "trainer.total_steps=2")).run()
    other = ["tasks=[{name:guess,env_id:envs.guess_number:GuessNumber,group_size:4},"
             "{name:cliff,env_id:CliffWalking-v1,max_turns:20,format_penalty:2,group_size:4}]",
             "trainer.total_steps=4", "trainer.resume=true"]
    with pytest.raises(ValueError, match="this run trained tasks frozenlake, guess; this command line has guess, "
                                         "cliff: .* or pass trainer.resume_other_tasks=true"):
        TrainingJob(_cfg(tmp_path, *other)).run()
    assert (run / "checkpoints" / "latest").read_text() == "step_000002"  # nothing ran
    TrainingJob(_cfg(tmp_path, *other, "trainer.resume_other_tasks=true")).run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # the new task trained (the run's queued guess prompts may come first), the dropped one not
    assert any(r.get("reward/cliff/mean") is not None for r in rows[2:])
    assert not any("reward/frozenlake/mean" in r for r in rows[2:])
    _weights, state, _ = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    assert state["step"] == 4  # the optimizer went on from the run's step
