"""Resume paths beside `engine=hf reward=local`: data-parallel workers and the emulator.

- trainer.num_workers=2 (ddp, gloo): every rank loads the same checkpoint, so the
  ranks start bitwise equal and the next step is the one an uninterrupted
  single-process run takes.
- reward.mode=serverless: a run killed with SIGKILL (the whole process group, as a
  terminal's kill or an OOM of the session does) leaves no emulator or worker
  behind, and its resume deploys over the killed run's emulator state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import torch

from roll_agentic.cluster import init_ray
from roll_agentic.config import AlgoConfig, RayConfig, TrainerConfig
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.parallel import DataParallelTrainer
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import DP_WEIGHT_TOLERANCE, random_batch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ddp_ranks_resume_the_same_checkpoint_and_continue_as_one_run(tiny_model_path, tmp_path):
    cfg = TrainerConfig(lr=1e-2, num_workers=2, micro_batch_size=4, lr_schedule="constant")
    straight = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=4, lr_schedule="constant"),
                             AlgoConfig())
    init_ray(RayConfig(num_cpus=4))
    dp = resumed = None
    try:
        dp = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        for s in range(2):
            dp.train_step(random_batch(s, 7))
            straight.train_step(random_batch(s, 7))
        save_checkpoint(tmp_path, 2, dp.engine_state_dict(), dp.state(), {"buffer": {}})
        dp.close()
        dp = None

        weights, state, run_state = load_checkpoint(latest_checkpoint(tmp_path))
        assert run_state["step"] == 2 and state["step"] == 2
        resumed = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        resumed.load_state(state, weights)
        a, b = resumed.parameters_per_worker()
        assert torch.equal(a, b), "the ranks loaded different weights"
        saved = resumed.engine_state_dict()
        assert all(torch.equal(saved[k], weights[k]) for k in weights), "rank 0 does not hold the checkpoint"
        assert resumed.state()["step"] == 2

        m_resumed, m_straight = resumed.train_step(random_batch(2, 7)), straight.train_step(random_batch(2, 7))
        a, b = resumed.parameters_per_worker()
        assert torch.equal(a, b), "the ranks diverged in the first step after the resume"
        assert m_resumed["train/lr"] == m_straight["train/lr"]
        assert m_resumed["train/loss"] == pytest.approx(m_straight["train/loss"], rel=1e-4)
        ref = torch.cat([p.detach().reshape(-1) for p in straight.model.parameters()])
        # Adam's moments came back on both ranks: restarted ones would move every weight by ~lr
        assert (a - ref).abs().max().item() < DP_WEIGHT_TOLERANCE
        assert resumed.state()["step"] == 3
    finally:
        for t in (dp, resumed):
            if t is not None:
                t.close()
        ray.shutdown()


def _emulators_of(state_dir: Path) -> list[int]:
    """Emulator and emulator-worker processes whose command line or environment names `state_dir`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            if b"serverless" not in cmd:
                continue
            if str(state_dir).encode() in cmd or str(state_dir).encode() in (d / "environ").read_bytes():
                stat = (d / "stat").read_text().rsplit(")", 1)[-1].split()
                if stat[0] != "Z":
                    out.append(int(d.name))
        except OSError:
            continue
    return out


def _shared_weights(run_name: str, pid: int) -> list[Path]:
    import tempfile

    return [d for base in (Path("/dev/shm"), Path(tempfile.gettempdir()))
            if (d := base / f"roll_agentic-{run_name}-{pid}").exists()]


def _remove_shared_weights(run_name: str, pid: int) -> None:
    import shutil

    for d in _shared_weights(run_name, pid):
        shutil.rmtree(d, ignore_errors=True)


def _wait_for(pred, timeout_s: float, every_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every_s)
    return pred()


@pytest.mark.slow
def test_a_serverless_run_killed_mid_rollout_leaves_no_emulator_and_resumes(tmp_path, tiny_model_path):
    """The default reward path (serverless) through SIGKILL of the run's process group and a resume.

    engine=hf keeps the test short: the vLLM engine's side of a resume was checked by hand
    (the first step after it has staleness 0 and a logprob diff of 0: the engines serve the
    checkpoint's weights before any rollout)."""
    args = [sys.executable, "-m", "roll_agentic.cli", "train", f"output_dir={tmp_path}", "run_name=k",
            "engine=hf", "reward=serverless", "trainer.total_steps=4", "trainer.save_every=1",
            "algo.groups_per_step=2", "rollout.num_workers=1", "rollout.groups_in_flight=2",
            "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.plots=false"]
    run_dir = tmp_path / "k"
    state_dir = run_dir / "serverless"
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled")
    first = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        assert _wait_for(lambda: (run_dir / "checkpoints" / "latest").exists() or first.poll() is not None, 300)
        assert first.poll() is None, first.stdout.read().decode(errors="replace")[-3000:]
        killed_at = int((run_dir / "checkpoints" / "latest").read_text().strip().rsplit("_", 1)[-1])
        assert killed_at < 4
        assert _emulators_of(state_dir), "the run's emulator was not found"
        os.killpg(first.pid, signal.SIGKILL)  # no handler runs: close() never stops the emulator
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
        first.stdout.close()
    # The emulator runs in a session of its own (it must not take the terminal's Ctrl-C),
    # so the group's kill missed it: it must notice and go by itself, workers with it.
    assert _wait_for(lambda: not _emulators_of(state_dir), 30), f"left running: {_emulators_of(state_dir)}"
    assert not (state_dir / "endpoint.json").exists()

    done = subprocess.run([*args, "trainer.resume=true"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    left = _shared_weights("k", first.pid)  # swept by the resumed run (its last weights, in RAM)
    _remove_shared_weights("k", first.pid)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not left, left
    assert f"resumed from {run_dir / 'checkpoints'}" in done.stdout
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1.0, 2.0, 3.0, 4.0], steps  # none repeated, none skipped
    assert not _emulators_of(state_dir)
    log = (state_dir / "emulator.log").read_text()
    assert "is gone: stopping" in log and log.count("listening on") == 2


def test_a_killed_runs_published_weights_do_not_stay_in_shared_memory(tmp_path):
    """The folder is keyed by the driver's pid and only WeightPublisher.close() removed it:
    a killed run's last weights stayed in /dev/shm (RAM) for good; a resume never swept them."""
    from roll_agentic.train.weight_sync import WeightPublisher

    run = f"shm-leak-{os.getpid()}"
    code = ("import sys, torch; from roll_agentic.train.weight_sync import WeightPublisher; "
            "p = WeightPublisher([], sys.argv[1]); p.publish(3, {'w': torch.zeros(1024)}); "
            "print(p.dir, flush=True); sys.stdin.read()")
    killed = subprocess.Popen([sys.executable, "-c", code, run], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    left = Path(killed.stdout.readline().strip())  # <shm>/roll_agentic-<run>-<pid of the killed run>
    killed.kill()  # SIGKILL: no close()
    killed.wait(10)
    killed.stdout.close()
    killed.stdin.close()
    try:
        assert (left / "weights_v3.safetensors").is_file()
        resumed = WeightPublisher([], run)  # the resumed run of the same name
        resumed.publish(4, {"w": torch.zeros(1024)})
        resumed.close()  # it finished normally
        leftovers = sorted(p.name for p in left.parent.glob(f"roll_agentic-{run}-*"))
        assert leftovers == [], f"left in shared memory: {leftovers}"
    finally:
        import shutil

        for d in left.parent.glob(f"roll_agentic-{run}-*"):
            shutil.rmtree(d, ignore_errors=True)
