"""bench engine: what the framework keeps of the engine's raw decode throughput.

Both sides use one engine actor, the same prompts and the same sampling, in
the same run:
- framework: single-turn, zero-latency episodes through rollout workers,
  the router, the buffer and trajectory records, exactly as training runs them;
- raw: the same engine driven directly inside its own actor, every prompt
  submitted at once (roll_agentic/bench/raw_engine.py).
`framework_vs_raw_engine` = framework tokens/s / raw tokens/s. Each side is
measured `--repeats` times, alternating, and the best of each is kept: on a
shared 2-core machine single rounds vary by 10-30 %, and the best is each
side's speed when nothing else got in its way. `median_framework_vs_raw` (the
medians' ratio) is printed beside it; the framework's rounds vary more (its
workers, buffer and router share the cores with the engine), which the
median counts against it. `paired_median_framework_vs_raw` is the median of each
framework round over the raw round measured right after it: the machine's speed
drifts over minutes, and a pair shares its moment.

A run that times out waiting for its workers still ends with the JSON line:
`error` says what timed out, beside the rounds measured before it; the exit
status is then 1 (`bench/cli.py`'s `report`). Every wait has a limit, each
round's too (`ROUND_TIMEOUT_S`): before, only the final one had, and a stuck
actor mid-run hung the benchmark for ever.
"""

from __future__ import annotations

import statistics
import time

import ray
from ray.exceptions import GetTimeoutError

from roll_agentic.arg_types import at_least
from roll_agentic.bench.cli import reporting_errors

# After stop(), a worker's run() returns once its groups in flight end (a few
# decodes here): a minute is far past that, so a timeout means a stuck worker.
RUNS_STOP_TIMEOUT_S = 60.0
# Every other wait of a round (the framework's batch, the raw engine's run, a stop)
# takes seconds (README's run: 128 episodes of 128 tokens of the tiny model a round):
# ten minutes means a stuck actor, where the run used to wait for ever.
ROUND_TIMEOUT_S = 600.0
# The engine's start loads the model (vLLM also compiles it and captures CUDA graphs):
# minutes at most on a cold machine.
ENGINE_START_TIMEOUT_S = 1800.0


class StuckWait(GetTimeoutError):
    """A wait of a benchmark past its limit (`timed_get`): what it waited for, and how long."""

    def __init__(self, what: str, timeout_s: float):
        super().__init__(f"{what} had not returned after {timeout_s:g} s (ray.get timed out)")
        self.what, self.timeout_s = what, timeout_s


def timed_get(ref, what: str, timeout_s: float = ROUND_TIMEOUT_S):
    """`ray.get(ref)` within `timeout_s`; past it StuckWait, naming `what` (a wait in words)."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except GetTimeoutError:
        raise StuckWait(what, timeout_s) from None


def figures(framework: list[float], raw: list[float]) -> dict:
    """The throughput figures of the rounds measured: all of them, or those before a failure.

    A round's framework side is measured before its raw side, so a run cut
    short may hold one framework round more; ratios use only complete pairs.
    """
    n = min(len(framework), len(raw))
    if n == 0:
        return {"framework_runs": [round(x, 1) for x in framework], "raw_runs": []}
    best_f, best_r = max(framework), max(raw)
    return {"framework_tokens_per_s": round(best_f, 1), "raw_engine_tokens_per_s": round(best_r, 1),
            "framework_runs": [round(x, 1) for x in framework], "raw_runs": [round(x, 1) for x in raw],
            "framework_vs_raw_engine": round(best_f / best_r, 3),
            "median_framework_vs_raw": round(statistics.median(framework) / statistics.median(raw), 3),
            "paired_median_framework_vs_raw": round(statistics.median(
                f / r for f, r in zip(framework[:n], raw[:n], strict=True)), 3)}


def run(backend: str, episodes: int, max_tokens: int, group_size: int, workers: int, repeats: int) -> dict:
    from transformers import AutoTokenizer

    from envs.single_turn import SingleTurnPrompt
    from roll_agentic.cluster import init_ray
    from roll_agentic.config import EngineConfig, RayConfig, RewardConfig, RolloutConfig, TaskConfig
    from roll_agentic.engine.factory import resolve_backend
    from roll_agentic.engine.host import engine_actor_class
    from roll_agentic.engine.protocol import SamplingParams
    from roll_agentic.engine.router import Router
    from roll_agentic.model.tiny import ensure_tiny_model
    from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
    from roll_agentic.rollout.conversation import chat_format_for
    from roll_agentic.rollout.worker import RolloutWorker

    backend = resolve_backend(backend)
    model_path = str(ensure_tiny_model(".cache/tiny-model").resolve())
    groups = episodes // group_size
    out: dict = {"backend": backend, "episodes": groups * group_size, "max_tokens": max_tokens}
    framework: list[float] = []
    raw: list[float] = []
    error = ""
    spawned: list = []  # the actors started so far: a run that times out kills them
    started = init_ray(RayConfig())
    try:
        task = TaskConfig(name="single", env_id="envs.single_turn:SingleTurnPrompt", max_turns=1,
                          reward="env_return", group_size=group_size, max_new_tokens=max_tokens)
        engine = engine_actor_class(num_cpus=1).remote(backend, model_path, EngineConfig(max_batch=256))
        spawned.append(engine)
        timed_get(engine.ping.remote(), "the engine's start", ENGINE_START_TIMEOUT_S)
        router = ray.remote(num_cpus=0)(Router).remote([("default", "any")], {"single": "default"})
        # As training runs it (its default): the next step's envs are reset and its
        # prompts built before the step opens; the timer starts when it opens.
        buffer = ray.remote(num_cpus=0)(TrajectoryBuffer).remote(
            [TaskShare("single", 1.0, group_size)], groups, 0, 0,
            prepare_ahead=RolloutConfig().prepare_next_step)
        actors = [ray.remote(num_cpus=0)(RolloutWorker).remote(
            i, [task], model_path, [engine], router, buffer, 0, 1.0, 1.0, 2048, RewardConfig(mode="local"), "",
            max(1, groups // workers), 60.0) for i in range(workers)]
        spawned += [router, buffer, *actors]
        runs = [w.run.remote() for w in actors]

        tok = AutoTokenizer.from_pretrained(model_path)
        fmt = chat_format_for(tok)
        sampling = SamplingParams(max_tokens=max_tokens, temperature=1.0, top_p=1.0, stop_token_ids=fmt.stop_token_ids)

        # Two warm-up rounds (actors, code paths, the engine): with one, the first
        # measured round was the slowest in 7 runs of 7, by 20-40 %. The raw side
        # warms up before each of its runs.
        timed_get(buffer.get_batch.remote(groups, 0), "warm-up round 1's framework batch")
        timed_get(buffer.advance.remote(1), "warm-up round 2's opening")
        timed_get(buffer.get_batch.remote(groups, 0), "warm-up round 2's framework batch")
        for step in range(2, repeats + 2):
            t0 = time.perf_counter()
            # Opens the next round's tickets. The weights never change here, so
            # batches are taken at version 0: nothing is stale.
            timed_get(buffer.advance.remote(step), f"round {step - 1}'s opening")
            batch = timed_get(buffer.get_batch.remote(groups, 0), f"round {step - 1}'s framework batch")
            elapsed = time.perf_counter() - t0
            trajs = [t for g in batch for t in g]
            framework.append(sum(sum(t.loss_mask) for t in trajs) / elapsed)
            prompts = []
            for t in trajs:  # the very prompts the framework sent
                obs, _ = SingleTurnPrompt().reset(seed=t.seed)
                prompts.append(fmt.observation_tokens(obs, first=True, last_reply_closed=True))
            raw.append(timed_get(engine.raw_tokens_per_s.remote(prompts, sampling),
                                 f"round {step - 1}'s raw engine run"))
        timed_get(buffer.stop.remote(), "the buffer's stop")
        for i, w in enumerate(actors):
            timed_get(w.stop.remote(), f"rollout worker {i}'s stop")
        ray.get(runs, timeout=RUNS_STOP_TIMEOUT_S)
        timed_get(engine.shutdown.remote(), "the engine's shutdown")
    except GetTimeoutError as err:
        # The rounds measured are kept: their figures are right, the run is not clean.
        if isinstance(err, StuckWait):
            error = (f"{err}, so an actor (a rollout worker, the buffer or the engine) is stuck: see Ray's "
                     "worker logs (by default /tmp/ray/session_latest/logs); the "
                     f"{min(len(framework), len(raw))} rounds measured before are kept")
        else:
            error = (f"the rollout workers had not returned {RUNS_STOP_TIMEOUT_S:g} s after they were told to "
                     "stop (ray.get timed out), so a worker is stuck: see Ray's worker logs (by default "
                     f"/tmp/ray/session_latest/logs); the {len(framework)} rounds measured before are kept")
        for actor in reversed(spawned):  # the workers first; a Ray this run did not start lives on
            ray.kill(actor)
    finally:
        if started:
            ray.shutdown()  # also ends a stuck worker
    result = {**out, **figures(framework, raw)}
    if error:
        result["error"] = error
    return result


def _main(args) -> int:
    from roll_agentic.bench.cli import report

    if args.episodes < args.group_size or args.episodes % args.group_size:
        raise SystemExit(f"bench engine: --episodes must be a multiple of --group-size ({args.group_size}), "
                         f"got {args.episodes}")
    return report(run(args.backend, args.episodes, args.max_tokens, args.group_size, args.workers, args.repeats),
                  args.json, "engine")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("engine", help="framework rollout path vs the same engine driven directly")
    p.add_argument("--backend", default="auto", help="auto | vllm | hf (default: %(default)s)")
    p.add_argument("--episodes", type=at_least(1), default=128, help="single-turn episodes per measurement (default: %(default)s)")
    p.add_argument("--max-tokens", type=at_least(1), default=128, help="tokens generated per episode (default: %(default)s)")
    p.add_argument("--group-size", type=at_least(1), default=8, help="episodes per prompt (one seed) (default: %(default)s)")
    p.add_argument("--workers", type=at_least(1), default=2, help="rollout worker actors (default: %(default)s)")
    p.add_argument("--repeats", type=at_least(1), default=8, help="alternating measurements of each side (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=reporting_errors("engine", _main))
