"""The load part of `bench reliability`: >= 1,000 trajectories in flight on this machine.

Real actors (EngineHost with the hf engine, Router, TrajectoryBuffer, one
RolloutWorker) on a local loopback Ray; the env is the zero-latency
single-turn prompt, so what is loaded is the framework: tickets, routing,
1,000 concurrent generate calls into one engine actor, rewards, hand-in.

Round 1 holds the engine asleep until every trajectory of the round is in
flight (proof of the concurrency, not an estimate of it), then wakes it;
later rounds run free. The RSS of the whole process tree (this process, Ray's
own processes and its workers) is sampled throughout; its value at the end of
each round shows whether memory grows with the number of trajectories served.
"""

from __future__ import annotations

import os
import threading
import time

import psutil

GROUP = 8
STATUS_OK = "ok"


class RssSampler:
    """Peak summed RSS of this process and all its descendants, sampled in a thread."""

    def __init__(self, interval_s: float = 0.2):
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.peak_process_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> float:
        me = psutil.Process(os.getpid())
        total, biggest = 0.0, 0.0
        for p in [me, *me.children(recursive=True)]:
            try:
                rss = p.memory_info().rss / 2**20
            except psutil.Error:  # exited between listing and reading
                continue
            total += rss
            biggest = max(biggest, rss)
        self.peak_mb = max(self.peak_mb, total)
        self.peak_process_mb = max(self.peak_process_mb, biggest)
        return total

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _wait_in_flight(worker, target: int, timeout_s: float) -> int:
    import ray

    deadline, seen = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        seen = max(seen, ray.get(worker.stats.remote(), timeout=timeout_s)["in_flight"])
        if seen >= target:
            break
        time.sleep(0.1)
    return seen


def load_test(trajectories: int = 1000, rounds: int = 3, seed: int = 0, model_path: str = "",
              timeout_s: float = 300.0) -> dict:
    """Runs `rounds` rounds of `trajectories` concurrent single-turn episodes; returns the figures."""
    import ray

    from roll_agentic.cluster import init_ray
    from roll_agentic.config import EngineConfig, RayConfig, RewardConfig, TaskConfig
    from roll_agentic.engine.host import engine_actor_class
    from roll_agentic.engine.router import Router
    from roll_agentic.model.tiny import ensure_tiny_model
    from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
    from roll_agentic.rollout.worker import RolloutWorker

    if trajectories < GROUP or trajectories % GROUP:
        raise ValueError(f"load test: trajectories must be a positive multiple of {GROUP}, got {trajectories}")
    groups = trajectories // GROUP
    model_path = model_path or str(ensure_tiny_model(".cache/tiny-model"))
    task = TaskConfig(name="load", env_id="envs.single_turn:SingleTurnPrompt", env_kwargs={"words": 6},
                      max_turns=1, reward="env_return", group_size=GROUP, max_new_tokens=4)
    started = init_ray(RayConfig(num_cpus=8))
    out = {"trajectories_in_flight_target": trajectories, "rounds": rounds, "ok": False, "error": ""}
    actors: list = []

    def get(ref):  # every wait is bounded: a stuck actor is this benchmark's finding, never a hang
        return ray.get(ref, timeout=timeout_s)

    try:
        with RssSampler() as rss:
            engine = engine_actor_class(1.0).remote("hf", model_path, EngineConfig(backend="hf", max_batch=128),
                                                    seed, "default", "any")
            router = ray.remote(num_cpus=0)(Router).remote([("default", "any")], {"load": "default"})
            # alpha = 0 and one step's worth of groups: each round issues exactly `groups` tickets
            buffer = ray.remote(num_cpus=0)(TrajectoryBuffer).remote([TaskShare("load", 1.0, GROUP)], groups, 0, seed)
            worker = ray.remote(num_cpus=0)(RolloutWorker).remote(
                0, [task], model_path, [engine], router, buffer, 0, 1.0, 1.0, 512, RewardConfig(mode="local"),
                "", groups, 30.0)
            actors = [engine, router, buffer, worker]
            get(engine.ping.remote())
            get(engine.sleep.remote())  # round 1: nothing finishes until all are in flight
            run = worker.run.remote()
            out["peak_in_flight"] = _wait_in_flight(worker, trajectories, timeout_s)
            get(engine.wake.remote())
            t0, served, bad, rss_by_round = time.monotonic(), 0, 0, []
            for r in range(rounds):
                batch = get(buffer.get_batch.remote(groups, 0))
                served += sum(len(g) for g in batch)
                bad += sum(1 for g in batch for t in g if t.status != STATUS_OK) + (groups - len(batch))
                rss_by_round.append(round(rss.sample(), 1))
                if r + 1 < rounds:
                    get(buffer.advance.remote(0))  # next round's tickets, same weights
            elapsed = time.monotonic() - t0
            get(buffer.stop.remote())
            get(worker.stop.remote())
            get(run)
            stats = get(worker.stats.remote())
            m = get(buffer.metrics.remote())
        failures = stats["engine_failures"] + stats["env_failures"] + int(m["buffer/trajectories_failed"]) + bad
        out.update({
            "trajectories": served, "seconds": round(elapsed, 2),
            "trajectories_per_s": round(served / elapsed, 1) if elapsed > 0 else 0.0,
            "peak_rss_mb": round(rss.peak_mb, 1), "peak_process_rss_mb": round(rss.peak_process_mb, 1),
            "rss_mb_by_round": rss_by_round, "failures": failures, "stale_restarts": stats["stale_restarts"],
        })
        out["ok"] = (out["peak_in_flight"] >= trajectories and failures == 0 and served == rounds * trajectories)
    except Exception as err:  # noqa: BLE001 - an error is this benchmark's finding
        out["error"] = f"{type(err).__name__}: {err}"
    finally:
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if started:
            ray.shutdown()
    return out
