"""Which stopped step the final checkpoint keeps: one whose update is whole, not one torn inside it.

An error after the trainer's update (the weight sync to the engines, a dead rollout worker, the
evaluation) counted the step as half done, and the run saved nothing: every step trained since
the last checkpoint was lost, though the trainer's weights, optimizer state and step agreed. An
error inside the update itself (one of two optimizer steps taken) must still save nothing.
"""

import json
import signal

import pytest

from roll_agentic.hydra_config import load_config
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint
from roll_agentic.train.job import TrainingJob
from roll_agentic.train.step_guard import StepGuard
from roll_agentic.train.termination import SigtermAsInterrupt
from roll_agentic.train.trainer import PolicyTrainer
from roll_agentic.train.weight_sync import WeightPublisher

pytestmark = pytest.mark.slow


def _cfg(tmp_path, *extra):
    # algo.alpha=0: every sample from the weights being trained, so a resumed step's logprobs
    # agreeing with the trainer's shows that its engines serve the checkpoint's weights.
    return load_config([
        f"output_dir={tmp_path}", "run_name=torn", "engine=hf", "algo.alpha=0",
        "algo.groups_per_step=2", "tasks.0.group_size=4", "tasks.1.group_size=4",
        "rollout.num_workers=1", "rollout.groups_in_flight=2", "telemetry.progress=false",
        "telemetry.plots=false", *extra])


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_sync_that_fails_after_the_update_saves_the_trained_step_and_a_resume_goes_on(
        tmp_path, tiny_model_path, monkeypatch, capsys):
    real_publish = WeightPublisher.publish
    refused = []

    def refused_once_at_v2(self, version, state):
        # Step 2's update is whole when its weights are published: every engine refusing
        # them (as a name mismatch or a file it cannot read makes them) stops the run there.
        if version == 2 and not refused:
            refused.append(version)
            raise RuntimeError("weight sync v2: every engine refused it; engine 0: injected")
        return real_publish(self, version, state)

    monkeypatch.setattr(WeightPublisher, "publish", refused_once_at_v2)
    run = tmp_path / "torn"
    # save_every=3: without the stop's checkpoint, nothing of steps 1 and 2 would be on disk.
    with pytest.raises(RuntimeError, match="every engine refused it"):
        TrainingJob(_cfg(tmp_path, "trainer.total_steps=4", "trainer.save_every=3")).run()
    assert refused == [2]
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None and ckpt.name == "step_000002"
    _weights, trainer_state, run_state = load_checkpoint(ckpt)
    # The step is saved as trained: the trainer's step, the run's version and the buffer's
    # count agree (a buffer not advanced resumed one step behind and re-rolled its prompts).
    assert trainer_state["step"] == 2 and run_state["step"] == 2
    assert run_state["buffer"]["steps_taken"] == 2 and run_state["buffer"]["version"] == 2
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2]  # the stopped step's row too: no gap in the log
    assert rows[1]["train/tokens"] > 0

    capsys.readouterr()
    resumed = TrainingJob(_cfg(tmp_path, "trainer.total_steps=3", "trainer.save_every=3",
                               "trainer.resume=true")).run()
    assert f"resumed from {ckpt} at step 2" in capsys.readouterr().out
    assert resumed["steps"] == 3 and not resumed["interrupted"]
    rows = _rows(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Step 3 sampled from the weights it trained: the resume published step 2's checkpoint to
    # its engines, which the failed sync never reached.
    assert rows[2]["rollout/staleness_max"] == 0 and rows[2]["train/logprob_diff"] < 1e-3
    _weights, trainer_state, run_state = load_checkpoint(latest_checkpoint(run / "checkpoints"))
    assert trainer_state["step"] == 3 and run_state["buffer"]["steps_taken"] == 3


def test_an_error_inside_the_update_leaves_the_previous_checkpoint(tmp_path, tiny_model_path, monkeypatch):
    """ppo_epochs=2 and the second optimizer step of step 3 fails: the weights hold half of
    step 3, so neither step 3 nor a relabelled step 2 may be saved."""
    real_apply = PolicyTrainer.apply
    before = {}

    def failing_second_epoch_of_step_3(self, step=None):
        if self.step == 2:  # step 3's update (trainer.step counts finished steps)
            before.setdefault("epochs", 0)
            before["epochs"] += 1
            if before["epochs"] == 2:  # the first of its two optimizer steps is taken
                saved = latest_checkpoint(self_run / "checkpoints")
                before["ckpt"] = (saved.name, (saved / "weights.safetensors").read_bytes(),
                                  (saved / "trainer.pt").read_bytes())
                raise RuntimeError("CUDA out of memory (injected, in the update)")
        return real_apply(self, step)

    self_run = tmp_path / "torn"
    monkeypatch.setattr(PolicyTrainer, "apply", failing_second_epoch_of_step_3)
    with pytest.raises(RuntimeError, match="injected, in the update"):
        TrainingJob(_cfg(tmp_path, "trainer.total_steps=4", "trainer.save_every=2",
                         "trainer.ppo_epochs=2")).run()
    saved = latest_checkpoint(self_run / "checkpoints")
    assert saved.name == before["ckpt"][0] == "step_000002"
    assert (saved / "weights.safetensors").read_bytes() == before["ckpt"][1]
    assert (saved / "trainer.pt").read_bytes() == before["ckpt"][2]
    assert not (self_run / "checkpoints" / "step_000003").exists()
    assert [r["step"] for r in _rows(self_run)] == [1, 2]
    # The handlers are back as before the run: the guard's restore ran after `term`'s and put
    # the run's SIGTERM-as-Ctrl-C back, for good, whenever an error stopped a step.
    handler = signal.getsignal(signal.SIGTERM)
    assert not isinstance(getattr(handler, "__self__", None), (SigtermAsInterrupt, StepGuard))
