"""`roll-agentic bench reliability --json`: faults injected into real runs, and what they cost.

Three measurements, each on real code paths of this machine:

1. Fault runs: TrainingJob (engine.backend=hf) for a few steps with faults
   switched on through roll_agentic/faults.py: env calls that crash or hang,
   an engine actor that dies (Ray restarts it), reward functions that raise,
   time out, answer NaN or non-JSON, or are throttled, and (serverless run)
   the emulator stopped and started again mid-run on the same port and state
   dir. After the last step no new tickets are issued, the workers finish
   the groups in flight, and every trajectory issued must be trained or
   dropped-and-counted: `trajectories_lost` is the remainder.
2. Trainer killed mid-checkpoint: a subprocess writes checkpoints in a loop
   (resuming from the latest each time) and is SIGKILLed, at a random time or
   inside save_checkpoint at a random stage; after each kill the latest
   checkpoint is loaded and checked value by value.
3. Load (roll_agentic/bench/reliability_load.py): >= 1,000 trajectories in
   flight at once against a zero-latency env and the hf engine.

A fault counts as survived when its run finished every step with nothing
lost (and, for the emulator restart, the functions were still deployed; for
a kill, the checkpoint loaded intact).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from roll_agentic import faults
from roll_agentic.arg_types import at_least
from roll_agentic.bench.cli import print_result

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GROUP_SIZE = 4
FAULT_RUNS = {
    # name: (reward mode, fault spec); engine_die is capped at 1: the engine actor has one restart
    "local": ("local", "env_crash:0.04,env_hang:0.02,engine_die:0.03:1,reward_raise:0.05,"
                       "reward_timeout:0.02,reward_nan:0.04,reward_nonjson:0.04"),
    "serverless": ("serverless", "env_crash:0.03,reward_throttle:0.1,reward_timeout:0.04,"
                                 "reward_raise:0.04,reward_nonjson:0.04"),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_config(workdir: Path, name: str, reward_mode: str, steps: int, endpoint: str):
    from roll_agentic.config import TaskConfig
    from roll_agentic.hydra_config import load_config

    over = [f"output_dir={workdir}", f"run_name={name}", "engine=hf", f"reward={reward_mode}",
            f"trainer.total_steps={steps}", "algo.groups_per_step=2", "rollout.num_workers=1",
            "rollout.groups_in_flight=3", "rollout.env_step_timeout_s=3.0", "reward.timeout_s=3.0",
            "reward.max_retries=8", "telemetry.progress=false", "telemetry.tensorboard=false",
            "telemetry.plots=false", "ray.num_cpus=8"]
    if endpoint:
        over += [f"reward.endpoint_url={endpoint}", "reward.timeout_s=5.0"]
    cfg = load_config(over)
    cfg.tasks = [TaskConfig(name="tail", env_id="envs.latency_env:LongTailEnv",
                            env_kwargs={"sleep": False, "min_turns": 1, "max_turns": 3, "filler_words": 4},
                            max_turns=3, reward="env_return", group_size=GROUP_SIZE, max_new_tokens=4)]
    return cfg


def drain_and_count(job, group_size: int, timeout_s: float = 180.0) -> dict:
    """Stops new tickets, lets the workers hand in what is in flight, and balances the books.

    issued = tickets x group size; every one must have come back (received) and been
    trained or dropped with a count. What is left in the ready queue is taken out
    here (it would be the next step's batch) and counts as trained.
    """
    import ray

    ray.get(job.buffer.stop.remote())
    ray.get(job.worker_runs, timeout=timeout_s)
    ray.get(job.buffer.get_batch.remote(10**9, job.version))
    m = ray.get(job.buffer.metrics.remote())
    issued = int(m["buffer/tickets_issued"]) * group_size
    received = int(m["buffer/trajectories_received"])
    accounted = int(m["buffer/trajectories_trained"] + m["buffer/trajectories_dropped"])
    workers = ray.get([w.stats.remote() for w in job.workers])
    return {"issued": issued, "received": received, "trained": int(m["buffer/trajectories_trained"]),
            "dropped": int(m["buffer/trajectories_dropped"]), "failed": int(m["buffer/trajectories_failed"]),
            "groups_requeued": int(m["buffer/groups_dropped_failed"] + m["buffer/groups_dropped_stale"]),
            "lost": (issued - received) + (received - accounted),
            "env_failures": sum(w["env_failures"] for w in workers),
            "engine_failures": sum(w["engine_failures"] for w in workers)}


def _start_ray(env: dict[str, str]) -> None:
    import logging

    import ray

    from roll_agentic.cluster import LOCAL_LOGICAL_CPUS, QUIET_ENV, loopback_environment

    _stop_ray()
    loopback_environment()
    ray.init(address="local", num_cpus=LOCAL_LOGICAL_CPUS, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": dict(QUIET_ENV, PYTHONWARNINGS="ignore", **env)},
             logging_level=logging.WARNING, configure_logging=True)


def _stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _functions_listed(endpoint: str, prefix: str) -> list[str]:
    from serverless.deploy import lambda_client

    client = lambda_client(endpoint, "us-east-1", max_attempts=3)
    try:
        return sorted(f["FunctionName"] for f in client.list_functions()["Functions"]
                      if f["FunctionName"].startswith(prefix))
    finally:
        client.close()


def fault_run(workdir: Path, name: str, reward_mode: str, spec: str, steps: int = 3, seed: int = 0,
              restart_emulator: bool = False) -> dict:
    """One TrainingJob with `spec` injected (and an emulator restart); its books and its faults."""
    from roll_agentic.reward.service import LocalServerless
    from roll_agentic.train.job import TrainingJob

    record = workdir / f"{name}-faults"
    env = {faults.ENV_SPEC: spec, faults.ENV_SEED: str(seed), faults.ENV_DIR: str(record),
           faults.ENV_HANG_S: "5.0"}  # past both timeouts, even on a loaded machine
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the emulator and its workers inherit it
    faults.reset(spec, seed, str(record))
    svc, endpoint, extra = None, "", {"injected": 0, "survived": 0}
    out: dict = {"name": name, "completed": False, "error": ""}
    try:
        _start_ray(env)  # Ray's workers get it explicitly, not by inheritance from whatever raylet runs
        if reward_mode == "serverless":
            port, state = _free_port(), workdir / f"{name}-emulator"
            svc = LocalServerless(extra_args=("--port", str(port)))
            endpoint = svc.start(state)
        job = TrainingJob(_job_config(workdir, name, reward_mode, steps, endpoint))
        try:
            job.start()
            while job.version < steps:
                job.step_once()
                if restart_emulator and svc is not None and job.version == 1:
                    # mid-run: the workers keep rolling out (and retrying rewards) meanwhile
                    svc.stop()
                    svc = LocalServerless(extra_args=("--port", str(port)))
                    svc.start(state)
                    kept = _functions_listed(endpoint, job.cfg.reward.function_prefix)
                    extra["injected"] += 1
                    extra["kept_functions"] = kept
            out["completed"] = job.version == steps
            out.update(drain_and_count(job, GROUP_SIZE))
        finally:
            job.close()
    except Exception as err:  # noqa: BLE001 - a failed run is a result of this benchmark
        out["error"] = f"{type(err).__name__}: {err}"
    finally:
        if svc is not None:
            svc.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        faults.reset()
        _stop_ray()
    injected = faults.read_injected(record)
    out["faults"] = dict(Counter(f["kind"] for f in injected))
    if extra["injected"]:
        out["faults"]["emulator_restart"] = extra["injected"]
        out["kept_functions"] = extra.get("kept_functions", [])
    out["faults_injected"] = len(injected) + extra["injected"]
    ok = out["completed"] and out.get("lost", 1) == 0
    kept = bool(extra.get("kept_functions"))  # the restarted emulator still had its functions
    out["faults_survived"] = (len(injected) if ok else 0) + (extra["injected"] if ok and kept else 0)
    return out


# -- the trainer killed mid-checkpoint ---------------------------------------------------------
def checkpoint_writer(root: str, mb: int = 4) -> None:
    """Subprocess body: resume from the latest checkpoint, then write one per step until killed."""
    import torch

    from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    ckpt = latest_checkpoint(root)
    step = int(load_checkpoint(ckpt)[2]["step"]) if ckpt else 0
    print("ready", flush=True)
    n = mb * 1024 * 1024 // 4
    while True:
        step += 1
        weights = {"w": torch.full((n,), float(step)), "b": torch.arange(64, dtype=torch.float32) + step}
        save_checkpoint(root, step, weights, {"step": step, "m": torch.full((1024,), float(step))},
                        {"buffer": {"step": step}}, keep=2)


def verify_checkpoint(root: Path) -> tuple[int, str]:
    """(step, "") for an intact latest checkpoint, (-1, why) for one that must not have loaded."""
    from roll_agentic.train.checkpoint import checkpoint_name, latest_checkpoint, load_checkpoint

    ckpt = latest_checkpoint(root)
    if ckpt is None:
        return 0, ""
    try:
        weights, state, run = load_checkpoint(ckpt)
    except Exception as err:  # noqa: BLE001 - a checkpoint that does not load is a corruption
        return -1, f"{ckpt.name}: {type(err).__name__}: {err}"
    step = int(run["step"])
    good = (ckpt.name == checkpoint_name(step) and state["step"] == step and run["buffer"]["step"] == step
            and bool((weights["w"] == step).all()) and bool((state["m"] == step).all())
            and bool((weights["b"] - step == weights["b"].new_tensor(range(64))).all()))
    return (step, "") if good else (-1, f"{ckpt.name}: values of another step or partly written")


def checkpoint_kills(workdir: Path, rounds: int = 8, seed: int = 0) -> dict:
    """Kills the writer `rounds` times (alternately at a random time and at a random stage)."""
    root = workdir / "ckpt-kill" / "checkpoints"
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]))
    kills = corruptions = 0
    last, errors, stages = 0, [], []
    for r in range(rounds):
        e = dict(env)
        if r % 2:  # inside save_checkpoint, at a random one of its stages of a random write
            e.update({faults.ENV_SPEC: "ckpt_kill:0.3:1", faults.ENV_SEED: str(seed * 1000 + r),
                      faults.ENV_DIR: str(workdir / f"ckpt-faults-{r}")})
        proc = subprocess.Popen([sys.executable, "-c", "import sys; from roll_agentic.bench.reliability import "
                                 "checkpoint_writer; checkpoint_writer(sys.argv[1])", str(root)],
                                cwd=str(PROJECT_ROOT), env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        ready = proc.stdout.readline().strip() == "ready"
        if r % 2:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stages += [f["where"] for f in faults.read_injected(workdir / f"ckpt-faults-{r}")]
        else:
            time.sleep(rng.uniform(0.2, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        stderr = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        if not ready or proc.returncode != -signal.SIGKILL:
            errors.append(f"round {r}: writer exited {proc.returncode} (ready={ready}): {stderr[-300:]}")
            continue
        kills += 1
        step, why = verify_checkpoint(root)
        if step < 0 or step < last:  # a resumed trainer must never go back past a complete step
            corruptions += 1
            errors.append(why or f"latest went back from step {last} to {step}")
        else:
            last = step
    return {"kills": kills, "rounds": rounds, "checkpoint_corruptions_loaded": corruptions, "last_step": last,
            "kill_stages": dict(Counter(stages)), "errors": errors}


# -- the whole benchmark -----------------------------------------------------------------------
def run_bench(workdir: Path, steps: int = 3, ckpt_rounds: int = 8, load_trajectories: int = 1000,
              load_rounds: int = 3, seed: int = 0, log=lambda *_: None) -> dict:
    from roll_agentic.bench.reliability_load import load_test

    runs = []
    for name, (mode, spec) in FAULT_RUNS.items():
        log(f"fault run {name}: {spec}")
        runs.append(fault_run(workdir, name, mode, spec, steps, seed, restart_emulator=mode == "serverless"))
        log(json.dumps(runs[-1]))
    log(f"checkpoint kills: {ckpt_rounds} rounds")
    ckpt = checkpoint_kills(workdir, ckpt_rounds, seed)
    log(json.dumps(ckpt))
    log(f"load: {load_trajectories} trajectories in flight x {load_rounds} rounds")
    load = load_test(load_trajectories, load_rounds, seed)
    log(json.dumps(load))
    return {
        "faults_injected": sum(r["faults_injected"] for r in runs) + ckpt["kills"],
        "faults_survived": sum(r["faults_survived"] for r in runs) + ckpt["kills"] - ckpt["checkpoint_corruptions_loaded"],
        "trajectories_lost": sum(r.get("lost", 0) for r in runs) + sum(1 for r in runs if "lost" not in r),
        "checkpoint_corruptions_loaded": ckpt["checkpoint_corruptions_loaded"],
        "load_trajectories_per_s": load["trajectories_per_s"],
        "load_peak_rss_mb": load["peak_rss_mb"],
        "load_ok": load["ok"],
        "runs": runs, "checkpoint": ckpt, "load": load,
    }


def _run(args: argparse.Namespace) -> int:
    log = (lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    from roll_agentic.bench.reliability_load import GROUP

    if args.load_trajectories % GROUP:  # checked before minutes of fault runs, not after them
        raise SystemExit(f"bench reliability: --load-trajectories must be a multiple of {GROUP}, "
                         f"got {args.load_trajectories}")
    with tempfile.TemporaryDirectory(prefix="roll-agentic-reliability-") as tmp:
        out = run_bench(Path(args.workdir or tmp), args.steps, args.ckpt_rounds, args.load_trajectories,
                        args.load_rounds, args.seed, log)
    out = print_result(out)
    good = (out["faults_survived"] == out["faults_injected"] and out["trajectories_lost"] == 0
            and out["checkpoint_corruptions_loaded"] == 0 and out["load_ok"])
    return 0 if good else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `reliability` benchmark to the `bench` command's subparsers."""
    p = subparsers.add_parser("reliability", help="faults injected into real runs; kill mid-checkpoint; load",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=at_least(1), default=3, help="training steps of each fault run (default: %(default)s)")
    p.add_argument("--ckpt-rounds", dest="ckpt_rounds", type=at_least(1), default=8, help="trainer kills mid-checkpoint (default: %(default)s)")
    p.add_argument("--load-trajectories", dest="load_trajectories", type=at_least(1), default=1000,
                   help="trajectories in flight at once in the load test, a multiple of 8 (default: %(default)s)")
    p.add_argument("--load-rounds", dest="load_rounds", type=at_least(1), default=3,
                   help="rounds of the load test, each --load-trajectories at once (default: %(default)s)")
    p.add_argument("--seed", type=at_least(0), default=0, help="seed of the fault runs and the load test (default: %(default)s)")
    p.add_argument("--workdir", default="", help="keep run folders here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=_run)
    return p
