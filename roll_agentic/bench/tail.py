"""bench tail: tail batching vs plain synchronous rollout, and streamed vs plain updates.

Same engine, same task (envs/tail_turns.py: episode lengths long-tailed,
the longest of a step about 25x its median, reported as
`sync_longest_over_median`), same P0 prompts x R0 responses per step, same
run. Each env step waits `env_step_s` (0.1 s by default), as an agentic
task's tool calls do. That wait matters on a CPU engine: there, a decode
step's cost grows with the number of sequences in it (on a GPU it barely
does), so over-provisioned short rounds cost engine time a GPU would not
charge; with instantaneous env steps (`--env-step-s 0`) the engine's own
batching cost decides the comparison. Weights stay fixed, so only the
rollout schedule differs:
- sync: every step waits for all P0 x R0 episodes (alpha = 0);
- tail: RollPacker's short rounds (eta x P0 prompts, eta x R0 responses,
  first P0 prompts with R0 good responses kept) and long rounds (P0 queued
  prompts, no over-provisioning).
`tail_batching_speedup` = sync rollout s/step / tail rollout s/step.
`stream_update_max_abs_diff`: one batch of groups from the tail run, updated
once with gradients streamed group by group and once after the whole batch,
from the same initial weights; the largest parameter difference (float64;
float32 beside it, with its rerun floor: see stream_update_diffs).

A run that times out waiting for its workers still ends with the JSON line:
`error` says which schedule's workers were stuck, beside the steps measured
before it; the exit status is then 1 (`bench/cli.py`'s `report`). Every wait
has a limit, each step's too (`STEP_TIMEOUT_S`): before, only the final one
had, and a stuck actor mid-run hung the benchmark for ever.
"""

from __future__ import annotations

import copy
import statistics
import time

import ray
from ray.exceptions import GetTimeoutError

from roll_agentic.arg_types import at_least, non_negative, positive
from roll_agentic.bench.cli import reporting_errors
from roll_agentic.bench.engine import ENGINE_START_TIMEOUT_S, StuckWait, timed_get

# After stop(), a worker's run() returns once its episodes in flight end: a few
# env steps of `--env-step-s` each, seconds. Two minutes means a stuck worker.
RUNS_STOP_TIMEOUT_S = 120.0
# Every other wait of a step (its opening, its batch, the buffer's metrics, a stop):
# a step's longest episode is about 25x its median, 64 turns at most of
# `--env-step-s` each, seconds to a minute; ten minutes means a stuck actor, where
# the run used to wait for ever.
STEP_TIMEOUT_S = 600.0


def _rollout_steps(buffer_cls, buffer_args, task, model_path, engine, steps: int, workers: int,
                   groups_in_flight: int, times: list[float]):
    """Measures `steps` steps; returns their batches and the buffer's metrics.

    Each step's seconds are appended to `times` as it is measured, so that a
    run that fails afterwards (GetTimeoutError: a worker did not stop) still
    has them to report.
    """
    from roll_agentic.config import RewardConfig
    from roll_agentic.engine.router import Router
    from roll_agentic.rollout.worker import RolloutWorker

    router = ray.remote(num_cpus=0)(Router).remote([("default", "any")], {task.name: "default"})
    buffer = ray.remote(num_cpus=0)(buffer_cls).remote(*buffer_args)
    actors = [ray.remote(num_cpus=0)(RolloutWorker).remote(
        i, [task], model_path, [engine], router, buffer, 0, 1.0, 1.0, 2048, RewardConfig(mode="local"), "",
        groups_in_flight, 60.0) for i in range(workers)]
    runs = [w.run.remote() for w in actors]
    p0 = buffer_args[1]
    batches = []
    try:
        # Warm-up step, not measured: actor and engine start-up.
        timed_get(buffer.get_batch.remote(p0, 0), "warm-up step's batch", STEP_TIMEOUT_S)
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            # Weights never change: version 0 throughout (a round of a later version would
            # take the engine's v0 turns for stale ones).
            timed_get(buffer.advance.remote(0), f"step {step}'s opening", STEP_TIMEOUT_S)
            batch = timed_get(buffer.get_batch.remote(p0, 0), f"step {step}'s batch", STEP_TIMEOUT_S)
            times.append(time.perf_counter() - t0)
            batches.append(batch)
        metrics = timed_get(buffer.metrics.remote(), "the buffer's metrics", STEP_TIMEOUT_S)
        timed_get(buffer.stop.remote(), "the buffer's stop", STEP_TIMEOUT_S)
        for i, w in enumerate(actors):
            timed_get(w.stop.remote(), f"rollout worker {i}'s stop", STEP_TIMEOUT_S)
        ray.get(runs, timeout=RUNS_STOP_TIMEOUT_S)
    finally:  # a stuck actor too: the next mode must not share the engine with it
        for a in [*actors, buffer, router]:
            ray.kill(a)
    return batches, metrics


def _max_abs_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))


def stream_update_diffs(model_path: str, groups: list) -> dict[str, float]:
    """Streamed vs plain update of one batch, from the same initial weights.

    `stream_update_max_abs_diff` is taken in float64, where it shows what
    streaming itself changes. In float32 (how training runs) a gradient
    summed in another memory layout can differ in its last bits, and AdamW,
    whose first step moves every parameter by about lr whatever its gradient's
    size, turns last-bit noise on a near-zero gradient into a visible step; so
    the float32 difference is printed beside the same plain update run twice
    (`rerun_max_abs_diff_fp32`), the floor any two runs share.
    """
    import torch

    from roll_agentic.config import AlgoConfig, TrainerConfig
    from roll_agentic.train.trainer import PolicyTrainer, samples_from_groups

    out = {}
    for dtype, key in ((torch.float64, "stream_update_max_abs_diff"), (torch.float32, "stream_update_max_abs_diff_fp32")):
        plain = PolicyTrainer(model_path, TrainerConfig(), AlgoConfig())
        plain.model.to(dtype)  # in place: the optimizer keeps the same parameters
        streamed = copy.deepcopy(plain)
        rerun = copy.deepcopy(plain) if dtype == torch.float32 else None
        plain.train_step(samples_from_groups(groups))
        for g in groups:  # as the stream trainer does: each finished group as it comes
            streamed.accumulate(samples_from_groups([g]))
        streamed.apply()
        out[key] = _max_abs_diff(plain, streamed)
        if rerun is not None:
            rerun.train_step(samples_from_groups(groups))
            out["rerun_max_abs_diff_fp32"] = _max_abs_diff(plain, rerun)
    return out


def longest_over_median(batches: list) -> float:
    """Per step, the longest episode's turns over the median episode's; the median over steps."""
    ratios = []
    for batch in batches:
        turns = [t.num_turns for g in batch for t in g]
        if turns:
            ratios.append(max(turns) / statistics.median(turns))
    return statistics.median(ratios) if ratios else 0.0


def run(backend: str, prompts: int, responses: int, steps: int, eta: float, workers: int,
        prompt_sigma: float = 1.0, response_sigma: float = 1.8, env_step_s: float = 0.1) -> dict:
    from roll_agentic.cluster import init_ray
    from roll_agentic.config import EngineConfig, RayConfig, TaskConfig
    from roll_agentic.engine.factory import resolve_backend
    from roll_agentic.engine.host import engine_actor_class
    from roll_agentic.model.tiny import ensure_tiny_model
    from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
    from roll_agentic.rollout.tail_batching import TailBatchingBuffer

    backend = resolve_backend(backend)
    model_path = str(ensure_tiny_model(".cache/tiny-model").resolve())
    params = {"backend": backend, "prompts_per_step": prompts, "responses_per_prompt": responses, "steps": steps,
              "eta": eta, "prompt_sigma": prompt_sigma, "response_sigma": response_sigma, "env_step_s": env_step_s}
    sync_t: list[float] = []
    tail_t: list[float] = []
    mode = ""  # the schedule being measured, for the error if its workers never stop
    started = init_ray(RayConfig())
    try:
        task = TaskConfig(name="tail", env_id="envs.tail_turns:TailTurnsEnv", max_turns=64, reward="env_return",
                          group_size=responses, max_new_tokens=8,
                          env_kwargs={"prompt_sigma": prompt_sigma, "response_sigma": response_sigma,
                                      "step_latency_s": env_step_s})
        engine = engine_actor_class(num_cpus=1).remote(backend, model_path, EngineConfig(max_batch=256,
                                                                                        max_model_len=2048))
        timed_get(engine.ping.remote(), "the engine's start", ENGINE_START_TIMEOUT_S)
        share = [TaskShare("tail", 1.0, responses)]
        in_flight = max(2, int(prompts * eta) // workers + 1)
        mode = "sync"
        sync_batches, _ = _rollout_steps(TrajectoryBuffer, (share, prompts, 0, 0), task, model_path, engine,
                                         steps, workers, in_flight, sync_t)
        mode = "tail"
        tail_batches, tail_m = _rollout_steps(TailBatchingBuffer, (share, prompts, 0, eta), task, model_path,
                                              engine, steps, workers, in_flight, tail_t)
        mode = ""
        timed_get(engine.shutdown.remote(), "the engine's shutdown", STEP_TIMEOUT_S)
        lengths = [t.num_turns for b in tail_batches for g in b for t in g]
        diffs = stream_update_diffs(model_path, tail_batches[-1])
        sync_s, tail_s = statistics.fmean(sync_t), statistics.fmean(tail_t)
        return {
            **params,
            # The workload's tail as plain synchronous steps see it (RollPacker measured 25-32x).
            "sync_longest_over_median": round(longest_over_median(sync_batches), 1),
            "sync_rollout_s_per_step": round(sync_s, 3), "tail_rollout_s_per_step": round(tail_s, 3),
            "sync_step_s": [round(x, 2) for x in sync_t], "tail_step_s": [round(x, 2) for x in tail_t],
            "rounds_short": tail_m["tail/rounds_short"], "rounds_long": tail_m["tail/rounds_long"],
            "aborted_prompts": tail_m["tail/aborted_prompts"], "long_queue_at_end": tail_m["tail/long_queue"],
            "trained_turns_median": statistics.median(lengths), "trained_turns_max": max(lengths),
            "tail_batching_speedup": round(sync_s / tail_s, 3),
            **diffs,
        }
    except GetTimeoutError as err:
        if not mode:
            raise  # not a schedule's wait: bench/cli.py's reporting_errors says what it was
        # The steps measured are kept: their times are right, the run is not clean.
        partial = {**params}
        for name, times in (("sync", sync_t), ("tail", tail_t)):
            if times:
                partial[f"{name}_rollout_s_per_step"] = round(statistics.fmean(times), 3)
                partial[f"{name}_step_s"] = [round(x, 2) for x in times]
        if isinstance(err, StuckWait):  # a wait of a step, or a stop
            partial["error"] = (f"in the {mode} schedule, {err}, so an actor (a rollout worker, the buffer or the "
                                "engine) is stuck: see Ray's worker logs (by default /tmp/ray/session_latest/logs); "
                                "the steps measured before are kept")
        else:
            partial["error"] = (f"the {mode} schedule's rollout workers had not returned {RUNS_STOP_TIMEOUT_S:g} s "
                                "after they were told to stop (ray.get timed out), so a worker is stuck: see Ray's "
                                "worker logs (by default /tmp/ray/session_latest/logs); the steps measured before "
                                "are kept")
        if not started:  # a Ray this run did not start lives on: the engine with it
            ray.kill(engine)
        return partial
    finally:
        if started:
            ray.shutdown()  # also ends a stuck worker


def _main(args) -> int:
    from roll_agentic.bench.cli import report

    return report(run(args.backend, args.prompts, args.responses, args.steps, args.eta, args.workers,
                      args.prompt_sigma, args.response_sigma, args.env_step_s), args.json, "tail")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("tail", help="tail batching vs synchronous rollout; streamed vs plain update")
    p.add_argument("--backend", default="auto", help="auto (vllm where it imports) | vllm | hf (default: %(default)s)")
    p.add_argument("--prompts", type=at_least(1), default=8, help="P0: prompts per step (default: %(default)s)")
    p.add_argument("--responses", type=at_least(1), default=4, help="R0: responses per prompt (default: %(default)s)")
    p.add_argument("--steps", type=at_least(1), default=20, help="steps measured per mode (default: %(default)s)")
    p.add_argument("--eta", type=positive, default=1.25, help="short-round over-provisioning (default: %(default)s)")
    p.add_argument("--workers", type=at_least(1), default=2, help="rollout worker actors (default: %(default)s)")
    p.add_argument("--prompt-sigma", type=non_negative, default=1.0, help="log-normal spread of episode length per prompt (default: %(default)s)")
    p.add_argument("--response-sigma", type=non_negative, default=1.8,
                   help="log-normal spread of episode length between responses of one prompt (default: %(default)s)")
    p.add_argument("--env-step-s", type=non_negative, default=0.1,
                   help="wall seconds of each env step, a tool call that waits, not computes (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=reporting_errors("tail", _main))
