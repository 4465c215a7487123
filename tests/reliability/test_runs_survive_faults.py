"""Real runs with faults injected, a trainer killed mid-checkpoint, and 1,000 trajectories in flight.

These drive the same functions as `roll-agentic bench reliability`; each
asserts what must hold whatever the timing: the run finishes, every issued
trajectory is trained or dropped with a count, nothing half-written loads.
"""

import os
import shutil

import pytest
import torch

from roll_agentic.bench.reliability import (
    FAULT_RUNS,
    checkpoint_kills,
    fault_run,
    verify_checkpoint,
)
from roll_agentic.bench.reliability_load import load_test
from roll_agentic.train.checkpoint import latest_checkpoint, save_checkpoint


@pytest.mark.slow
def test_local_run_survives_env_engine_and_reward_faults(tmp_path, tiny_model_path):
    mode, spec = FAULT_RUNS["local"]
    spec = spec.replace("engine_die:0.03:1", "engine_die:1:1:12")  # its 12th request, whatever the draws
    out = fault_run(tmp_path, "local", mode, spec, steps=3, seed=1)
    assert out["error"] == "" and out["completed"], out
    assert out["lost"] == 0 and out["issued"] == out["received"] == out["trained"] + out["dropped"]
    assert out["faults"].get("engine_die") == 1  # the engine actor died once and Ray brought it back
    assert out["faults_injected"] >= 3 and out["faults_survived"] == out["faults_injected"]


@pytest.mark.slow
def test_serverless_run_survives_reward_faults_and_an_emulator_restart(tmp_path, tiny_model_path):
    mode, spec = FAULT_RUNS["serverless"]
    out = fault_run(tmp_path, "serverless", mode, spec, steps=3, seed=2, restart_emulator=True)
    assert out["error"] == "" and out["completed"], out
    assert out["lost"] == 0 and out["issued"] == out["received"]
    assert out["faults"]["emulator_restart"] == 1
    assert out["kept_functions"] == ["roll-agentic-env_return"]  # deployed functions outlive the process
    assert out["faults_survived"] == out["faults_injected"]


@pytest.mark.slow
def test_trainer_killed_mid_checkpoint_always_resumes_from_a_complete_one(tmp_path):
    out = checkpoint_kills(tmp_path, rounds=6, seed=3)
    assert out["errors"] == [] and out["kills"] == 6
    assert out["checkpoint_corruptions_loaded"] == 0 and out["last_step"] >= 1


def test_a_replaced_or_pruned_checkpoint_killed_midway_is_not_loaded(tmp_path):
    def w(step):
        return {"w": torch.full((4,), float(step)), "b": torch.arange(64, dtype=torch.float32) + step}

    for step in (1, 2):
        save_checkpoint(tmp_path, step, w(step), {"step": step, "m": torch.full((4,), float(step))},
                        {"buffer": {"step": step}})
    # a kill while step 2 was being replaced: the old copy set aside whole, the new one not yet
    # renamed in. The set-aside copy is put back (before, the run went back to step 1).
    os.replace(tmp_path / "step_000002", tmp_path / f"step_000002.tmp-old-{os.getpid()}")
    assert latest_checkpoint(tmp_path).name == "step_000002"
    assert verify_checkpoint(tmp_path) == (2, "")
    # set aside, then partly deleted: not a whole copy, never put back
    os.replace(tmp_path / "step_000002", tmp_path / f"step_000002.tmp-old-{os.getpid()}")
    (tmp_path / f"step_000002.tmp-old-{os.getpid()}" / "weights.safetensors").unlink()
    assert latest_checkpoint(tmp_path).name == "step_000001"
    assert verify_checkpoint(tmp_path) == (1, "")
    # a kill while pruning step 1: renamed first, so what is left is an ignored temp dir
    shutil.copytree(tmp_path / "step_000001", tmp_path / f"step_000001.tmp-del-{os.getpid()}")
    (tmp_path / f"step_000001.tmp-del-{os.getpid()}" / "weights.safetensors").unlink()
    assert verify_checkpoint(tmp_path) == (1, "")


@pytest.mark.slow
def test_a_thousand_trajectories_in_flight_without_errors_or_growth(tiny_model_path):
    out = load_test(1000, rounds=3, model_path=tiny_model_path)
    assert out["error"] == "" and out["ok"], out
    assert out["peak_in_flight"] >= 1000 and out["failures"] == 0 and out["trajectories"] == 3000
    first, last = out["rss_mb_by_round"][0], out["rss_mb_by_round"][-1]
    assert last <= first * 1.25 + 100  # serving 2,000 more trajectories did not grow memory with them
