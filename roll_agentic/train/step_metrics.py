"""The rollout side of a step's metrics: rewards per task, throughput, staleness, reward service."""

from __future__ import annotations

import statistics

from roll_agentic.rollout.trajectory import Trajectory

LAMBDA_PRICE_PER_REQUEST = 0.20 / 1e6
LAMBDA_PRICE_PER_GB_S = 0.0000166667


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def rollout_metrics(groups: list[list[Trajectory]], version: int, engine_stats: list[dict],
                    last_engine_stats: list[dict], worker_stats: list[dict], step_s: float) -> dict[str, float]:
    trajs = [t for g in groups for t in g]
    m: dict[str, float] = {}
    for task in sorted({t.task for t in trajs}):
        ts = [t for t in trajs if t.task == task]
        m[f"reward/{task}/mean"] = statistics.fmean(t.reward for t in ts)
        m[f"reward/{task}/success"] = statistics.fmean(float(t.success) for t in ts)
        m[f"rollout/{task}/turns"] = statistics.fmean(t.num_turns for t in ts)
        m[f"rollout/{task}/invalid_frac"] = statistics.fmean(t.num_invalid / max(1, t.num_turns) for t in ts)
    gen = [e["engine"].get("generated_tokens", 0.0) - (p["engine"].get("generated_tokens", 0.0) if p else 0.0)
           for e, p in zip(engine_stats, last_engine_stats or [None] * len(engine_stats), strict=False)]
    m["rollout/tokens_per_s"] = sum(gen) / max(step_s, 1e-9)
    m["rollout/in_flight"] = float(sum(w.get("in_flight", 0) for w in worker_stats))
    m["rollout/staleness_mean"] = statistics.fmean(version - t.start_version for t in trajs) if trajs else 0.0
    m["rollout/staleness_max"] = float(max((version - t.start_version for t in trajs), default=0))
    m["rollout/llm_s_mean"] = statistics.fmean(t.llm_s for t in trajs) if trajs else 0.0
    m["rollout/env_s_mean"] = statistics.fmean(t.env_s for t in trajs) if trajs else 0.0
    m["rollout/stale_restarts"] = float(sum(w.get("stale_restarts", 0) for w in worker_stats))
    m["rollout/engine_failures"] = float(sum(w.get("engine_failures", 0) for w in worker_stats))
    m["rollout/env_failures"] = float(sum(w.get("env_failures", 0) for w in worker_stats))
    infos = [t.reward_info for t in trajs if t.reward_info]
    lat = [i.get("latency_s", 0.0) for i in infos]
    gb_s = sum(i.get("gb_s", 0.0) for i in infos)
    m["reward/invocations"] = float(len(infos))
    m["reward/cold_starts"] = float(sum(bool(i.get("cold_start")) for i in infos))
    m["reward/throttles"] = float(sum(i.get("throttles", 0) for i in infos))
    m["reward/retries"] = float(sum(i.get("retries", 0) for i in infos))
    m["reward/latency_p50_ms"] = 1000 * _pct(lat, 0.5)
    m["reward/latency_p99_ms"] = 1000 * _pct(lat, 0.99)
    m["reward/gb_s"] = gb_s
    m["reward/cost_usd"] = len(infos) * LAMBDA_PRICE_PER_REQUEST + gb_s * LAMBDA_PRICE_PER_GB_S
    for e in engine_stats:
        pool = e.get("pool", "default")
        key = f"pool/{pool}/busy_fraction"
        m[key] = max(m.get(key, 0.0), min(1.0, e.get("busy_s", 0.0) / max(e.get("uptime_s", 1.0), 1e-9)))
    return m
