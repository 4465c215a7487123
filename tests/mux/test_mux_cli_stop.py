"""`roll-agentic mux run` stopped by SIGTERM, then `--resume`d, as a user runs them.

The multiplexer's stop is covered on the actor (test_multiplexer_e2e.py); this is the
command: the signal reaches it while it waits on Ray, it stops the job with its newest
step checkpointed, prints the command that goes on and exits 143; that command then
takes the job to its last step in the same run directory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TASK = ('tasks=[{name:guess,env_id:"envs.guess_number:GuessNumber",env_kwargs:{low:1,high:8},max_turns:2,'
        'reward:guess_number,group_size:4,max_new_tokens:4}]')
STEPS = 60  # many fast steps: the job is still going when the stop reaches it (~1 s)


def _yaml(out: Path, model: str, steps: int = STEPS) -> str:
    overrides = ["engine=hf", "reward=local", "algo=sync", f"model.path={model}", f"trainer.total_steps={steps}",
                 "trainer.save_every=100", "algo.groups_per_step=2", "rollout.num_workers=1",
                 "rollout.groups_in_flight=2", "telemetry.tensorboard=false", TASK]
    return "\n".join([
        "name: cli_stop", f"output_dir: {out}", "backend: hf", f"model_path: {model}", "rollout_nodes: 1",
        "engines_per_node: 1", "train_nodes: 1", "residency_budget_bytes: 268435456", "train_threads: 1",
        "warm_switch_s: 0.0", "profile_margin: 1.0", "slo_headroom: 0.0", "jobs:", "  - name: a", "    slo: 3.0",
        "    overrides:", *[f"      - {json.dumps(o)}" for o in overrides], ""])


def _rows(run: Path) -> list[int]:
    path = run / "jobs" / "a" / "metrics.jsonl"
    return [json.loads(x)["step"] for x in path.read_text().splitlines()] if path.exists() else []


def test_sigterm_stops_mux_run_checkpointed_and_resume_goes_on(tmp_path, tiny_model_path):
    out = tmp_path / "out"
    conf = tmp_path / "mux.yaml"
    conf.write_text(_yaml(out, tiny_model_path))
    cmd = [sys.executable, "-m", "roll_agentic.cli", "mux", "run", str(conf), "--quiet"]
    proc = subprocess.Popen([*cmd, "--no-solo", "--run-name", "r"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(_rows(out / "r")) < 3:  # past its 2-step probe: running in its group
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        printed, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, printed
    assert "SIGTERM: stopping every job" in printed, printed
    ckpt = (out / "r" / "jobs" / "a" / "checkpoints" / "latest").read_text()
    step = int(ckpt.removeprefix("step_"))
    assert 3 <= step < STEPS and f"stopped at step {step}" in printed, printed
    assert f"to go on: roll-agentic mux run {conf} --resume {out / 'r'}" in printed, printed
    assert _rows(out / "r") == list(range(1, step + 1))

    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed from step {step}" in resumed.stdout, resumed.stdout
    assert _rows(out / "r") == list(range(1, STEPS + 1))
    assert (out / "r" / "jobs" / "a" / "checkpoints" / "latest").read_text() == f"step_{STEPS:06d}"

    # One step more than it took, asked of the finished run: fewer steps left than its probe
    # takes, and it trains no further than its new last one.
    conf.write_text(_yaml(out, tiny_model_path, STEPS + 1))
    longer = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=400)
    assert longer.returncode == 0 and f"resumed from step {STEPS}" in longer.stdout, longer.stdout + longer.stderr
    assert _rows(out / "r") == list(range(1, STEPS + 2))
