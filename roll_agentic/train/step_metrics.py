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


def no_signal_share(groups: list[list[Trajectory]]) -> float:
    """The share of `groups` whose rewards are all equal (GRPO advantages exactly 0, advantages.py)."""
    return statistics.fmean(float(len({t.reward for t in g}) <= 1) for g in groups) if groups else 0.0


def rollout_metrics(groups: list[list[Trajectory]], version: int, engine_stats: list[dict],
                    last_engine_stats: list[dict], worker_stats: list[dict], step_s: float,
                    routing: dict | None = None, prices: dict[str, float] | None = None) -> dict[str, float]:
    trajs = [t for g in groups for t in g]
    m: dict[str, float] = {}
    for task in sorted({t.task for t in trajs}):
        ts = [t for t in trajs if t.task == task]
        m[f"reward/{task}/mean"] = statistics.fmean(t.reward for t in ts)
        m[f"reward/{task}/success"] = statistics.fmean(float(t.success) for t in ts)
        m[f"rollout/{task}/turns"] = statistics.fmean(t.num_turns for t in ts)
        m[f"rollout/{task}/invalid_frac"] = statistics.fmean(t.num_invalid / max(1, t.num_turns) for t in ts)
        # GRPO's health: a group whose rewards are all equal has advantage 0 and teaches
        # nothing. Near 1 for long, a task is stuck (every member fails, or all succeed alike).
        task_groups = [g for g in groups if g and g[0].task == task]
        m[f"reward/{task}/no_signal_groups"] = no_signal_share(task_groups)
        m[f"batch/{task}/groups"] = float(len(task_groups))  # the step's task mix (rollout/step_mix.py)
    if groups:
        m["reward/no_signal_groups"] = no_signal_share(groups)
    # max(0, ...): an engine restarted by Ray counts from 0 again, which is no negative rate.
    gen = [max(0.0, e["engine"].get("generated_tokens", 0.0) - (p["engine"].get("generated_tokens", 0.0) if p else 0.0))
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
    # How well generate requests are batched into Ray calls (cumulative; 1.0 = one call each).
    calls = sum(w.get("engine_calls", 0) for w in worker_stats)
    m["rollout/requests_per_engine_call"] = sum(w.get("engine_requests", 0) for w in worker_stats) / calls if calls else 0.0
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
    m.update(pool_metrics(engine_stats, last_engine_stats, step_s, routing, prices))
    return m


def _task_tokens(stats: dict | None) -> tuple[float, float]:
    per_task = (stats or {}).get("per_task") or {}
    return (sum(t.get("prefill_tokens", 0.0) for t in per_task.values()),
            sum(t.get("decode_tokens", 0.0) for t in per_task.values()))


def pool_metrics(engine_stats: list[dict], last_engine_stats: list[dict] | None, step_s: float,
                 routing: dict | None = None, prices: dict[str, float] | None = None) -> dict[str, float]:
    """Per engine pool, over the step: busy fraction, queue, token rates; so far: routing, cost.

    `engine_stats` are EngineHost.stats() (dead engines carry their last figures
    and alive=False, see engine/pool_stats.py); `routing` is Router.snapshot();
    `prices` maps a pool to its price per engine-hour.
    """
    m: dict[str, float] = {}
    last = list(last_engine_stats or [])
    last += [None] * (len(engine_stats) - len(last))
    pools: dict[str, list[tuple[dict, dict | None]]] = {}
    for e, p in zip(engine_stats, last, strict=False):
        pools.setdefault(e.get("pool", "default"), []).append((e, p))
    total_cost = 0.0
    for pool, members in sorted(pools.items()):
        live = [(e, p) for e, p in members if e.get("alive", True)]
        busy = []
        for e, p in live:
            # Over the step where a previous reading exists, else since the engine started.
            d_busy = e.get("busy_s", 0.0) - (p.get("busy_s", 0.0) if p else 0.0)
            d_up = e.get("uptime_s", 0.0) - (p.get("uptime_s", 0.0) if p else 0.0)
            busy.append(min(1.0, max(0.0, d_busy) / d_up) if d_up > 0 else 0.0)
        prefill = decode = 0.0
        for e, p in members:
            (pf, dc), (pf0, dc0) = _task_tokens(e), _task_tokens(p)
            prefill += max(0.0, pf - pf0)  # an engine that restarted counts from zero again
            decode += max(0.0, dc - dc0)
        cost = (prices or {}).get(pool, 0.0) / 3600.0 * sum(e.get("uptime_s", 0.0) for e, _ in members)
        total_cost += cost
        k = f"pool/{pool}"
        m[f"{k}/busy_fraction"] = sum(busy) / len(busy) if busy else 0.0
        m[f"{k}/outstanding"] = float(sum(e.get("outstanding", 0) for e, _ in live))
        m[f"{k}/live_engines"] = float(len(live))
        m[f"{k}/prefill_tokens_per_s"] = prefill / max(step_s, 1e-9)
        m[f"{k}/decode_tokens_per_s"] = decode / max(step_s, 1e-9)
        m[f"{k}/cost_usd"] = cost
        served: dict[str, float] = {}
        for e, _ in members:
            for task, t in (e.get("per_task") or {}).items():
                served[task] = served.get(task, 0.0) + t.get("requests", 0.0)
        for task, n in served.items():
            m[f"{k}/served/{task}"] = n  # requests this pool's engines answered, by task
    m["cost/pools_usd"] = total_cost
    if routing:
        for task, by_pool in routing.get("routed", {}).items():
            for pool, n in by_pool.items():
                m[f"pool/{pool}/routed/{task}"] = float(n)  # trajectories sent there, by task
        m["router/fallbacks"] = float(routing.get("fallbacks", 0))
        for pool, n in routing.get("fallbacks_by_pool", {}).items():
            m[f"pool/{pool}/fallbacks"] = float(n)
        for task, d in routing.get("decode_per_request", {}).items():
            m[f"router/{task}/decode_per_request"] = float(d)
    return m
