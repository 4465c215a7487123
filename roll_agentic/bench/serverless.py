"""`roll-agentic bench serverless`: the emulator's invoke latency, and what per-trajectory
serverless rewards save over rewarding the whole batch in process.

What one measured "training step" is: N trajectories finish at staggered times
over a rollout window of W seconds (sorted uniform draws, the last one at W;
the rollout itself is modelled by sleeping until each finish time). Each
trajectory's reward costs 50-500 ms of CPU (`serverless/samples/busy.py`,
counted in thread CPU time so it is the same work wherever it runs).

- serverless: each trajectory is scored the moment it finishes, by a real
  Invoke of the deployed function in the emulator (ServerlessRewardClient),
  overlapping with the rest of the rollout;
- batch: after the last trajectory finishes, all rewards are computed in
  the trainer process (LocalRewardClient, same concurrency bound), where
  pure-Python rewards share one GIL.

reward_wait = step end - last finish; fraction = reward_wait / step wall time.
Environments are warmed first with one burst of tiny invocations, as the
first step of a run would. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from roll_agentic.arg_types import at_least, non_negative, positive
from roll_agentic.bench.cli import print_result, standalone_main
from roll_agentic.config import RewardConfig

BUSY = "busy"  # serverless/samples/busy.py, deployed as <prefix>busy


@dataclass
class BenchConfig:
    trajectories: int = 32  # trajectories in one training step
    window_s: float = 8.0  # rollout window over which they finish
    min_reward_ms: float = 50.0
    max_reward_ms: float = 500.0
    concurrency: int = 16  # reward calls in flight (both modes)
    warm_invokes: int = 200  # sequential warm invokes timed for the p50
    cold_starts: int = 3  # fresh functions whose first invoke is timed
    steps: int = 1  # measured steps per mode (averaged)
    seed: int = 0
    state_dir: str = ""  # "" = a temporary directory


def _samples_dir() -> Path:
    import serverless.samples

    return Path(serverless.samples.__file__).resolve().parent


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def measure_invoke_latency(url: str, cfg: BenchConfig) -> dict:
    """Warm p50/p90 of a trivial reward through boto3, and cold starts of fresh functions."""
    from roll_agentic.reward.lambda_client import parse_report
    from serverless.deploy import deploy, lambda_client, spec_for

    client = lambda_client(url)
    rewards_dir = Path(__import__("rewards").__file__).resolve().parent
    name = deploy(client, spec_for(rewards_dir / "env_return.py"))["FunctionName"]
    payload = json.dumps({"env_return": 1.0, "num_invalid": 0}).encode()
    client.invoke(FunctionName=name, Payload=payload)  # the cold one
    warm = []
    for _ in range(cfg.warm_invokes):
        t0 = time.perf_counter()
        resp = client.invoke(FunctionName=name, Payload=payload, LogType="Tail")
        resp["Payload"].read()
        warm.append((time.perf_counter() - t0) * 1000.0)
    cold, init = [], []
    for i in range(cfg.cold_starts):
        fn = deploy(client, spec_for(rewards_dir / "env_return.py", name=f"bench-cold-{i}"))["FunctionName"]
        t0 = time.perf_counter()
        resp = client.invoke(FunctionName=fn, Payload=payload, LogType="Tail")
        resp["Payload"].read()
        cold.append((time.perf_counter() - t0) * 1000.0)
        init.append(parse_report(resp.get("LogResult")).init_ms or 0.0)
    client.close()
    return {
        "warm_invoke_p50_ms": round(statistics.median(warm), 3),
        "warm_invoke_p90_ms": round(_pct(warm, 90), 3),
        "cold_start_ms": round(statistics.median(cold), 1),
        "init_duration_ms": round(statistics.median(init), 1),
    }


def _workload(cfg: BenchConfig, step: int) -> tuple[list[float], list[dict]]:
    rng = random.Random(cfg.seed * 1000 + step)
    finish = sorted(rng.uniform(0.05, 1.0) * cfg.window_s for _ in range(cfg.trajectories))
    finish[-1] = cfg.window_s
    summaries = [{"seed": rng.randrange(1 << 30), "work_ms": rng.uniform(cfg.min_reward_ms, cfg.max_reward_ms)}
                 for _ in range(cfg.trajectories)]
    return finish, summaries


async def _step_serverless(client, finish: list[float], summaries: list[dict]) -> tuple[float, float, list]:
    t0 = time.monotonic()

    async def one(at: float, summary: dict):
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))  # the trajectory ends
        return await client.score(BUSY, summary)  # ... and is rewarded at once

    outcomes = await asyncio.gather(*(one(at, s) for at, s in zip(finish, summaries, strict=True)))
    wall = time.monotonic() - t0
    return wall, max(0.0, wall - finish[-1]), outcomes


async def _step_batch(client, finish: list[float], summaries: list[dict]) -> tuple[float, float, list]:
    t0 = time.monotonic()
    await asyncio.sleep(finish[-1])  # the whole rollout, then the reward stage
    outcomes = await asyncio.gather(*(client.score(BUSY, s) for s in summaries))
    wall = time.monotonic() - t0
    return wall, max(0.0, wall - finish[-1]), outcomes


async def measure_reward_wait(url: str, cfg: BenchConfig) -> dict:
    from roll_agentic.reward import LocalRewardClient, ServerlessRewardClient

    remote = ServerlessRewardClient(url, max_concurrency=cfg.concurrency, max_retries=4)
    local = LocalRewardClient(max_concurrency=cfg.concurrency, package="serverless.samples")
    # Warm the environments a step would keep busy (a run's first step does this).
    await asyncio.gather(*(remote.score(BUSY, {"work_ms": 0}) for _ in range(cfg.concurrency)))
    await local.score(BUSY, {"work_ms": 0})
    res: dict[str, list[float]] = {k: [] for k in ("sl_wall", "sl_wait", "b_wall", "b_wait")}
    failures, gb_s = 0, 0.0
    expected_ok = True
    for step in range(cfg.steps):
        finish, summaries = _workload(cfg, step)
        wall, wait, outs = await _step_serverless(remote, finish, summaries)
        res["sl_wall"].append(wall)
        res["sl_wait"].append(wait)
        failures += sum(not o.ok for o in outs)
        gb_s += sum(o.gb_s for o in outs)
        expected = [(s["seed"] % 7) / 7.0 for s in summaries]
        expected_ok &= all(o.value == e for o, e in zip(outs, expected, strict=True) if o.ok)
        wall, wait, outs = await _step_batch(local, finish, summaries)
        res["b_wall"].append(wall)
        res["b_wait"].append(wait)
        failures += sum(not o.ok for o in outs)
        expected_ok &= all(o.value == e for o, e in zip(outs, expected, strict=True) if o.ok)
    await remote.close()
    await local.close()
    m = {k: statistics.mean(v) for k, v in res.items()}
    f_sl, f_b = m["sl_wait"] / m["sl_wall"], m["b_wait"] / m["b_wall"]
    return {
        "reward_wait_fraction_serverless": round(f_sl, 4),
        "reward_wait_fraction_batch": round(f_b, 4),
        "fraction_ratio": round(f_sl / f_b, 4) if f_b > 0 else None,
        "reward_wait_s_serverless": round(m["sl_wait"], 3),
        "reward_wait_s_batch": round(m["b_wait"], 3),
        "step_wall_s_serverless": round(m["sl_wall"], 3),
        "step_wall_s_batch": round(m["b_wall"], 3),
        "reward_failures": failures,
        "rewards_match": expected_ok,
        "serverless_gb_s": round(gb_s, 4),
    }


def run_bench(cfg: BenchConfig, log=print) -> dict:
    from roll_agentic.reward import LocalServerless, deploy_rewards

    with tempfile.TemporaryDirectory(prefix="bench-serverless-") as tmp, LocalServerless() as svc:
        url = svc.start(Path(cfg.state_dir or tmp))
        log(f"emulator at {url}")
        deploy_rewards(url, [BUSY], RewardConfig(mode="serverless", timeout_s=30), source_dir=_samples_dir())
        lat = measure_invoke_latency(url, cfg)
        log(f"warm invoke p50 {lat['warm_invoke_p50_ms']} ms (p90 {lat['warm_invoke_p90_ms']}), "
            f"cold start {lat['cold_start_ms']} ms (init {lat['init_duration_ms']} ms)")
        wait = asyncio.run(measure_reward_wait(url, cfg))
        log(f"reward wait: serverless {wait['reward_wait_s_serverless']} s of {wait['step_wall_s_serverless']} s "
            f"({wait['reward_wait_fraction_serverless']:.1%}); batch {wait['reward_wait_s_batch']} s of "
            f"{wait['step_wall_s_batch']} s ({wait['reward_wait_fraction_batch']:.1%})")
    # Other work on the host slows both modes and backs up the serverless queue: say how busy it was.
    load_1m = os.getloadavg()[0]
    return {**lat, **wait, "host_load_1m": round(load_1m, 2), "host_cpus": os.cpu_count(),
            "trajectories": cfg.trajectories, "window_s": cfg.window_s,
            "reward_ms_range": [cfg.min_reward_ms, cfg.max_reward_ms], "concurrency": cfg.concurrency,
            "steps": cfg.steps}


def _run(args: argparse.Namespace) -> int:
    fields = {k: getattr(args, k) for k in asdict(BenchConfig()) if hasattr(args, k)}
    cfg = BenchConfig(**fields)
    if cfg.min_reward_ms > cfg.max_reward_ms:
        raise SystemExit(f"bench serverless: --min-reward-ms {cfg.min_reward_ms:g} is above --max-reward-ms "
                         f"{cfg.max_reward_ms:g}")
    out = run_bench(cfg, log=(lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr)))
    out = print_result(out)
    return 0 if out["reward_failures"] == 0 and out["rewards_match"] else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `serverless` benchmark to the `bench` command's subparsers."""
    p = subparsers.add_parser("serverless", help="emulator latency and reward wait: per-trajectory serverless vs batch",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = BenchConfig()
    p.add_argument("--trajectories", type=at_least(1), default=d.trajectories, help="trajectories per step (default: %(default)s)")
    p.add_argument("--window-s", dest="window_s", type=positive, default=d.window_s, help="rollout window in s (default: %(default)s)")
    p.add_argument("--min-reward-ms", dest="min_reward_ms", type=non_negative, default=d.min_reward_ms, help="cheapest reward in ms of CPU (default: %(default)s)")
    p.add_argument("--max-reward-ms", dest="max_reward_ms", type=positive, default=d.max_reward_ms, help="dearest reward in ms of CPU (default: %(default)s)")
    p.add_argument("--concurrency", type=at_least(1), default=d.concurrency, help="reward calls in flight (default: %(default)s)")
    p.add_argument("--warm-invokes", dest="warm_invokes", type=at_least(1), default=d.warm_invokes, help="invokes timed for the warm p50 (default: %(default)s)")
    p.add_argument("--cold-starts", dest="cold_starts", type=at_least(1), default=d.cold_starts, help="fresh functions timed for the cold start (default: %(default)s)")
    p.add_argument("--steps", type=at_least(1), default=d.steps, help="measured steps per mode (default: %(default)s)")
    p.add_argument("--seed", type=at_least(0), default=d.seed, help="workload seed (default: %(default)s)")
    p.add_argument("--state-dir", dest="state_dir", default="", help="emulator state dir (default: a temporary one)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=_run)
    return p


def main(argv: list[str] | None = None) -> int:
    return standalone_main("serverless", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
