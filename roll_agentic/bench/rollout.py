"""`roll-agentic bench rollout`: trajectory-level asynchronous rollout vs batch-synchronous.

Both modes run in one process, in one run, on the same engine(s) and the same
long-tail agentic workload (envs/latency_env.py: env-step latency drawn from
a heavy-tailed distribution, episode lengths varying; every draw comes from
the episode's seed), with the same seeds, the same number of concurrent
episodes and the same sampling settings:

- async: the real RolloutWorker path (tickets from a TrajectoryBuffer,
  Router, one coroutine per episode, rewards as each episode ends), with
  `concurrency / group_size` groups in flight. Ray is replaced by in-process
  handles with the same `.remote` call convention, so Ray's start-up and
  transport are out of both measurements.
- sync: BatchSyncRollout (bench/sync_rollout.py): batches of `concurrency`
  episodes, each turn waiting for the slowest generation and then the
  slowest environment of its batch.

The seeds are the buffer's ticket stream (GRPO groups of `group_size`
episodes of one seed), read from a twin buffer for the sync mode. Figure:
trajectories per second of each mode; `async_vs_sync` is their ratio. The
engine is warmed before either mode runs. The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from roll_agentic.arg_types import at_least, non_negative
from roll_agentic.bench.cli import print_result, standalone_main
from roll_agentic.config import EngineConfig, RewardConfig, TaskConfig
from roll_agentic.engine.protocol import SamplingParams

TASK = "longtail"


@dataclass
class RolloutBenchConfig:
    episodes: int = 64  # trajectories per mode
    concurrency: int = 16  # episodes in flight (async) = batch size (sync)
    group_size: int = 2  # episodes per ticket (GRPO group, one seed)
    backend: str = "hf"  # hf | vllm | auto
    engines: int = 1
    min_turns: int = 2
    max_turns: int = 8
    distribution: str = "lognormal"
    latency_median_s: float = 0.2  # env time ~80% of a trajectory, as in SWE-like agentic tasks
    latency_sigma: float = 1.0
    latency_cap_s: float = 2.0
    max_new_tokens: int = 8
    seed: int = 0
    model_path: str = ""  # "" = the tiny model


class _InProcess:
    """`handle.method.remote(...)` on a local object: the Ray call convention without Ray."""

    def __init__(self, obj: Any):
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._obj, name)

        class _M:
            @staticmethod
            def remote(*args, **kwargs):
                result = fn(*args, **kwargs)
                if asyncio.iscoroutine(result):
                    return asyncio.ensure_future(result)
                fut = asyncio.get_running_loop().create_future()
                fut.set_result(result)
                return fut

        return _M()


def bench_task(cfg: RolloutBenchConfig) -> TaskConfig:
    return TaskConfig(name=TASK, env_id="envs.latency_env:LongTailEnv",
                      env_kwargs={"min_turns": cfg.min_turns, "max_turns": cfg.max_turns,
                                  "distribution": cfg.distribution, "latency_median_s": cfg.latency_median_s,
                                  "latency_sigma": cfg.latency_sigma, "latency_cap_s": cfg.latency_cap_s},
                      max_turns=cfg.max_turns, reward="env_return", group_size=cfg.group_size,
                      max_new_tokens=cfg.max_new_tokens)


def _buffer(cfg: RolloutBenchConfig):
    from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer

    groups = cfg.episodes // cfg.group_size
    # alpha = 0 and one "step" of exactly `groups` groups: the buffer issues that many tickets, no more.
    return TrajectoryBuffer([TaskShare(TASK, 1.0, cfg.group_size)], groups_per_step=groups, alpha=0, seed=cfg.seed)


async def ticket_seeds(cfg: RolloutBenchConfig) -> list[tuple[str, int]]:
    """(group id, seed) of every episode the async mode will run, in ticket order."""
    twin = _buffer(cfg)
    out: list[tuple[str, int]] = []
    for _ in range(cfg.episodes // cfg.group_size):
        t = await twin.next_ticket()
        out += [(t.group_id, t.seed)] * t.group_size
    return out


def workload_profile(cfg: RolloutBenchConfig, seeds: list[tuple[str, int]]) -> dict:
    """The turns and env-step latencies those seeds draw (without sleeping): the same for both modes."""
    from envs.latency_env import LongTailEnv

    env = LongTailEnv(**bench_task(cfg).env_kwargs, sleep=False)
    turns, lat = [], []
    for _, seed in seeds:
        env.reset(seed=seed)
        turns.append(env.turns)
        lat += env.latencies
    s = sorted(lat)
    return {"turns_mean": round(statistics.fmean(turns), 3), "turns_total": sum(turns),
            "env_step_s_mean": round(statistics.fmean(lat), 4), "env_step_s_p50": round(s[len(s) // 2], 4),
            "env_step_s_p99": round(s[min(len(s) - 1, int(0.99 * len(s)))], 4), "env_step_s_max": round(s[-1], 4)}


async def run_async(cfg: RolloutBenchConfig, engines: list[Any], model_path: str) -> dict:
    from roll_agentic.engine.router import Router
    from roll_agentic.rollout.worker import RolloutWorker

    buffer = _buffer(cfg)
    router = Router([("default", "bench")] * len(engines), {TASK: "default"})
    worker = RolloutWorker(0, [bench_task(cfg)], model_path, engines, _InProcess(router), _InProcess(buffer),
                           0, 1.0, 1.0, 1024, RewardConfig(mode="local"), "",
                           max(1, cfg.concurrency // cfg.group_size), 120.0)
    t0 = time.perf_counter()
    run = asyncio.ensure_future(worker.run())
    groups = await buffer.get_batch(cfg.episodes // cfg.group_size, version=0)
    wall = time.perf_counter() - t0
    await buffer.stop()
    await worker.stop()
    await run
    trajs = [t for g in groups for t in g]
    return {"wall_s": wall, "trajectories": len(trajs), "turns": sum(t.num_turns for t in trajs),
            "generated_tokens": sum(sum(t.loss_mask) for t in trajs),
            "failures": buffer.counters.trajectories_failed, "restarts": dict(worker.counters),
            **_time_split(trajs)}


def _time_split(trajs: list) -> dict:
    """Mean seconds per trajectory waiting on the LLM and on the env (sync: including the barriers)."""
    n = max(1, len(trajs))
    return {"llm_s_per_traj": sum(t.llm_s for t in trajs) / n, "env_s_per_traj": sum(t.env_s for t in trajs) / n}


async def run_sync(cfg: RolloutBenchConfig, engines: list[Any], model_path: str,
                   seeds: list[tuple[str, int]]) -> dict:
    from transformers import AutoTokenizer

    from roll_agentic.bench.sync_rollout import BatchSyncRollout
    from roll_agentic.reward import make_reward_client
    from roll_agentic.rollout.conversation import chat_format_for

    fmt = chat_format_for(AutoTokenizer.from_pretrained(model_path))
    sync = BatchSyncRollout(bench_task(cfg), engines, fmt, make_reward_client(RewardConfig(mode="local"), ""))
    t0 = time.perf_counter()
    trajs = await sync.run(seeds, cfg.concurrency)
    wall = time.perf_counter() - t0
    ok = [t for t in trajs if t.status == "ok"]
    return {"wall_s": wall, "trajectories": len(ok), "turns": sum(t.num_turns for t in ok),
            "generated_tokens": sum(sum(t.loss_mask) for t in ok), "failures": len(trajs) - len(ok),
            **_time_split(ok)}


async def _bench(cfg: RolloutBenchConfig, log) -> dict:
    from roll_agentic.config import Config, ModelConfig
    from roll_agentic.engine.factory import resolve_backend
    from roll_agentic.engine.host import EngineHost
    from roll_agentic.train.job_setup import resolve_model_path

    # Env steps block a thread each (as real envs do): enough threads that the
    # pool is never what serialises them, in either mode.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2 * cfg.concurrency + 8))
    model_path = resolve_model_path(Config(model=ModelConfig(path=cfg.model_path)))
    backend = resolve_backend(cfg.backend)
    ecfg = EngineConfig(backend=backend, max_batch=max(64, cfg.concurrency))
    hosts = [EngineHost(backend, model_path, ecfg, seed=cfg.seed + i, hardware="bench") for i in range(cfg.engines)]
    engines = [_InProcess(h) for h in hosts]
    for i, e in enumerate(engines):  # first-call costs out of both measurements
        await e.generate.remote([1, 2, 3], SamplingParams(max_tokens=2), f"warmup-{i}", "warmup")
    seeds = await ticket_seeds(cfg)
    profile = workload_profile(cfg, seeds)
    log(f"workload: {cfg.episodes} episodes, {profile}")
    sync = await run_sync(cfg, engines, model_path, seeds)
    log(f"sync:  {sync['trajectories']} trajectories in {sync['wall_s']:.2f}s")
    asyn = await run_async(cfg, engines, model_path)
    log(f"async: {asyn['trajectories']} trajectories in {asyn['wall_s']:.2f}s")
    for h in hosts:
        await h.shutdown()
    sync_tps = sync["trajectories"] / sync["wall_s"]
    async_tps = asyn["trajectories"] / asyn["wall_s"]
    return {
        "bench": "rollout", "backend": backend, "episodes": cfg.episodes, "concurrency": cfg.concurrency,
        "group_size": cfg.group_size, "engines": cfg.engines,
        "workload": {"distribution": cfg.distribution, "latency_median_s": cfg.latency_median_s,
                     "latency_sigma": cfg.latency_sigma, "latency_cap_s": cfg.latency_cap_s,
                     "turns": [cfg.min_turns, cfg.max_turns], "max_new_tokens": cfg.max_new_tokens, **profile},
        "sync": {k: round(v, 3) if isinstance(v, float) else v for k, v in sync.items()},
        "async": {k: round(v, 3) if isinstance(v, float) else v for k, v in asyn.items()},
        "same_turns": sync["turns"] == asyn["turns"] == profile["turns_total"],
        "host_load_1m": round(os.getloadavg()[0], 2), "host_cpus": os.cpu_count(),
        "sync_trajectories_per_s": round(sync_tps, 3), "async_trajectories_per_s": round(async_tps, 3),
        "async_vs_sync": round(async_tps / sync_tps, 3),
    }


def run_bench(cfg: RolloutBenchConfig, log=lambda *_: None) -> dict:
    if cfg.episodes < cfg.group_size or cfg.episodes % cfg.group_size:
        raise ValueError(f"--episodes must be a positive multiple of the group size {cfg.group_size}")
    if cfg.concurrency < cfg.group_size or cfg.concurrency % cfg.group_size:
        raise ValueError(f"--concurrency must be a positive multiple of the group size {cfg.group_size}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return asyncio.run(_bench(cfg, log))


def _run(args: argparse.Namespace) -> int:
    fields = {k: getattr(args, k) for k in asdict(RolloutBenchConfig()) if hasattr(args, k)}
    cfg = RolloutBenchConfig(**fields)
    if cfg.episodes < cfg.group_size or cfg.episodes % cfg.group_size or cfg.concurrency % cfg.group_size:
        raise SystemExit(f"bench rollout: --episodes and --concurrency must be multiples of --group-size "
                         f"({cfg.group_size}), got {cfg.episodes} and {cfg.concurrency}")
    if cfg.min_turns > cfg.max_turns:
        raise SystemExit(f"bench rollout: --min-turns {cfg.min_turns} is above --max-turns {cfg.max_turns}")
    out = run_bench(cfg, log=(lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr)))
    out = print_result(out)
    return 0 if out["sync"]["failures"] == 0 and out["async"]["failures"] == 0 else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `rollout` benchmark to the `bench` command's subparsers."""
    p = subparsers.add_parser("rollout", help="trajectory-level async rollout vs batch-synchronous, same engine",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = RolloutBenchConfig()
    p.add_argument("--episodes", type=at_least(1), default=d.episodes, help="trajectories per mode (default: %(default)s)")
    p.add_argument("--concurrency", type=at_least(1), default=d.concurrency, help="episodes in flight (async) and batch size (sync) (default: %(default)s)")
    p.add_argument("--group-size", dest="group_size", type=at_least(1), default=d.group_size, help="episodes per seed (default: %(default)s)")
    p.add_argument("--backend", default=d.backend, choices=["hf", "vllm", "auto"], help="rollout engine (default: %(default)s)")
    p.add_argument("--engines", type=at_least(1), default=d.engines, help="engines shared by both modes (default: %(default)s)")
    p.add_argument("--min-turns", dest="min_turns", type=at_least(1), default=d.min_turns,
                   help="fewest turns of an episode (default: %(default)s)")
    p.add_argument("--max-turns", dest="max_turns", type=at_least(1), default=d.max_turns,
                   help="most turns of an episode (default: %(default)s)")
    p.add_argument("--distribution", default=d.distribution, choices=["lognormal", "pareto"],
                   help="distribution of an env step's latency (default: %(default)s)")
    p.add_argument("--latency-median-s", dest="latency_median_s", type=non_negative, default=d.latency_median_s,
                   help="median seconds of an env step (default: %(default)s)")
    p.add_argument("--latency-sigma", dest="latency_sigma", type=non_negative, default=d.latency_sigma,
                   help="lognormal sigma, the tail's weight (default: %(default)s)")
    p.add_argument("--latency-cap-s", dest="latency_cap_s", type=non_negative, default=d.latency_cap_s,
                   help="longest seconds of an env step (default: %(default)s)")
    p.add_argument("--max-new-tokens", dest="max_new_tokens", type=at_least(1), default=d.max_new_tokens,
                   help="tokens generated per turn (default: %(default)s)")
    p.add_argument("--seed", type=at_least(0), default=d.seed, help="workload seed (default: %(default)s)")
    p.add_argument("--model-path", dest="model_path", default="", help="local HF checkpoint (default: tiny model)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=_run)
    return p


def main(argv: list[str] | None = None) -> int:
    return standalone_main("rollout", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
