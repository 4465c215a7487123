"""Routing trajectories to engines: pick a pool, then the least-loaded engine, then stick.

A trajectory is assigned once, when its first prompt is ready, and keeps its
engine for every turn (its prefix cache lives there). The pool comes from
one of two policies:

- `affinity` (RollArt R1): each task names its pool; tasks without one go to
  the default pool.
- `phase_aware`: the request's prefill tokens (context the engine does not
  hold yet) and expected decode tokens (running per-task average) are timed
  on each pool's hardware class with the cost model and priced at the pool's
  own price_per_hour where the config gives one (else its class's), and the
  cheapest pool wins; ties go to the task's own pool.

Inside a pool: the engine with the fewest active trajectories. A pool with no
live engine sends its requests to the default pool and counts a fallback
(and logs one warning per pool), so a lost pool slows a run, never stops it.
`RoutingTable` is pure state (tested without Ray); `Router` is its Ray actor.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roll_agentic.engine.cost_model import CostModel, RequestMix

log = logging.getLogger(__name__)

DEFAULT_DECODE_PRIOR = 32.0  # expected reply tokens of a task nothing is known about yet
DEMAND_EMA = 0.3  # weight of the newest observation window in the running decode average


@dataclass
class EngineSlot:
    index: int
    pool: str
    hardware: str
    alive: bool = True
    active: int = 0  # trajectories assigned and not yet released
    assigned_total: int = 0


@dataclass
class TaskDemand:
    """Running estimate of one task's reply length, from the engines' per-task counters."""

    decode_per_request: float
    observed: bool = False

    def update(self, requests: float, decode_tokens: float) -> None:
        """One observation window: the requests and decode tokens served since the last one."""
        if requests <= 0 or decode_tokens < 0:  # nothing new
            return
        sample = decode_tokens / requests
        self.decode_per_request = sample if not self.observed else (
            (1 - DEMAND_EMA) * self.decode_per_request + DEMAND_EMA * sample)
        self.observed = True


@dataclass
class RoutingTable:
    """Pure routing state; the Router actor wraps it (kept separate to test without Ray)."""

    engines: list[EngineSlot]
    task_pools: dict[str, str]
    default_pool: str = "default"
    policy: str = "affinity"  # affinity | phase_aware
    cost_model: CostModel | None = None
    decode_prior: dict[str, float] = field(default_factory=dict)  # task -> expected reply tokens
    # pool -> $ per engine-hour (pools[].price_per_hour; 0 or absent: not given, its class's price
    # stands). Before, only the class's price was used, so pools priced in the config and left at
    # router.hardware's default price of 1.0 were chosen by expected time alone.
    pool_prices: dict[str, float] = field(default_factory=dict)
    sticky: dict[str, int] = field(default_factory=dict)
    context: dict[str, int] = field(default_factory=dict)  # traj -> tokens its engine already holds
    routed: dict[str, dict[str, int]] = field(default_factory=dict)  # task -> pool -> count
    fallbacks: int = 0
    fallbacks_by_pool: dict[str, int] = field(default_factory=dict)  # the pool that was wanted
    demand: dict[str, TaskDemand] = field(default_factory=dict)
    decisions: dict[str, dict] = field(default_factory=dict)  # task -> its latest phase-aware decision
    _warned: set[str] = field(default_factory=set)
    # (engine index, task) -> that engine's (requests, decode tokens) counters at the last observe
    _seen: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in ("affinity", "phase_aware"):
            raise ValueError(f"router policy: expected affinity or phase_aware, got {self.policy!r}")
        bad = {p: v for p, v in self.pool_prices.items() if not (0.0 <= v < math.inf)}
        if bad:
            raise ValueError(f"router pool prices: expected $/engine-hour >= 0 (0 = not given), got {bad}")
        pools = sorted({e.pool for e in self.engines})
        priced = [p for p in pools if self.pool_prices.get(p, 0.0) > 0]
        if self.policy == "phase_aware" and priced and len(priced) < len(pools):
            # Dollars from a pool's price against router.hardware's price of a class (1.0 by default)
            # compare only if both are real rates: said once, where the run starts.
            log.warning("router: pools %s have a price_per_hour and %s do not; these are costed at their "
                        "hardware class's router.hardware price", priced, [p for p in pools if p not in priced])

    # -- the decision ------------------------------------------------------------------------
    def assign(self, task: str, traj_id: str, prompt_tokens: int = 0) -> int:
        """The engine for `traj_id`'s next request of `prompt_tokens` tokens (0 = unknown)."""
        index = self.sticky.get(traj_id)
        if index is not None and self.engines[index].alive:
            self.context[traj_id] = max(self.context.get(traj_id, 0), prompt_tokens)
            return index
        if index is not None:  # its engine died: its slot there is freed before it moves
            self.release(traj_id)
        chosen = self._pick(task, self.choose_pool(task, traj_id, prompt_tokens))
        self._record(task, traj_id, prompt_tokens, chosen)
        return chosen.index

    def told(self, task: str, traj_id: str, prompt_tokens: int, index: int) -> None:
        """An assignment a worker made itself (it has one engine): counted, never re-decided.

        Re-deciding it counted a fallback for every note while that engine was
        marked dead, though the request went to the only engine there is.
        """
        held = self.sticky.get(traj_id)
        if held == index:
            self.context[traj_id] = max(self.context.get(traj_id, 0), prompt_tokens)
            return
        if held is not None:
            self.release(traj_id)
        self._record(task, traj_id, prompt_tokens, self.engines[index])

    def _record(self, task: str, traj_id: str, prompt_tokens: int, chosen: EngineSlot) -> None:
        chosen.active += 1
        chosen.assigned_total += 1
        self.sticky[traj_id] = chosen.index
        self.context[traj_id] = prompt_tokens
        by_pool = self.routed.setdefault(task, {})
        by_pool[chosen.pool] = by_pool.get(chosen.pool, 0) + 1

    def estimate(self, task: str, traj_id: str, prompt_tokens: int) -> RequestMix:
        """Prefill = the context the engine does not hold yet; decode = the task's running average."""
        held = self.context.get(traj_id, 0) if traj_id in self.sticky else 0
        demand = self.demand.get(task)
        decode = demand.decode_per_request if demand else self.decode_prior.get(task, DEFAULT_DECODE_PRIOR)
        return RequestMix(float(max(0, prompt_tokens - held)), float(decode))

    def choose_pool(self, task: str, traj_id: str, prompt_tokens: int = 0) -> str:
        """The pool a new trajectory should go to, before liveness is considered."""
        own = self.task_pools.get(task, self.default_pool)
        if self.policy != "phase_aware" or self.cost_model is None:
            return own
        # Ties keep the task's own pool, then the default one: candidates in that order.
        hardware = self.pool_hardware()
        order = [own, self.default_pool] + sorted(p for p in hardware if p not in (own, self.default_pool))
        # Only pools that can serve now: costing a dead pool chose it, and the request then
        # fell back to the default pool though the task's own pool was alive.
        candidates = {p: hardware[p] for p in order if p in hardware and self._live(p)}
        if not candidates:
            return own  # none can serve: the fallback is taken (and counted) in _pick
        mix = self.estimate(task, traj_id, prompt_tokens)
        # cost per trajectory turn = its time on the pool's hardware x that pool's price
        best, costs = self.cost_model.cheapest(candidates, mix, self.pool_prices)
        if best is None:  # no pool's class is in the cost model: nothing to compare
            return own
        self.decisions[task] = {"pool": best, "prefill_tokens": mix.prefill_tokens,
                                "decode_tokens": mix.decode_tokens, "cost_usd": dict(costs)}
        return best

    def _live(self, pool: str) -> list[EngineSlot]:
        return [e for e in self.engines if e.pool == pool and e.alive]

    def _pick(self, task: str, pool: str) -> EngineSlot:
        live = self._live(pool)
        if not live:
            # The wanted pool is gone: the default pool serves, and the loss is counted.
            self.fallbacks += 1
            self.fallbacks_by_pool[pool] = self.fallbacks_by_pool.get(pool, 0) + 1
            if pool not in self._warned:
                self._warned.add(pool)
                log.warning("router: pool %r has no live engine; task %r falls back to pool %r",
                            pool, task, self.default_pool)
            live = self._live(self.default_pool) or [e for e in self.engines if e.alive]
        if not live:
            raise RuntimeError("no live rollout engine in any pool")
        return min(live, key=lambda e: (e.active, e.assigned_total))

    # -- lifecycle of trajectories and engines -------------------------------------------------
    def release(self, traj_id: str) -> None:
        self.context.pop(traj_id, None)
        index = self.sticky.pop(traj_id, None)
        if index is not None:
            self.engines[index].active = max(0, self.engines[index].active - 1)

    def mark_dead(self, index: int) -> None:
        """Out of routing until `mark_alive`. Its `active` count and sticky entries stay: an
        EngineTimeout marks a live engine dead, and the trajectories still running there
        release their slots themselves (zeroing them here left the engine counted as idle
        while it served them, and least-loaded placement then over-filled it)."""
        self.engines[index].alive = False
        for traj, i in self.sticky.items():
            if i == index:  # their context died with the engine: the next engine prefills it all
                self.context.pop(traj, None)

    def reset(self) -> None:
        """Every engine alive, no trajectory assigned: the workers were killed and rebuilt, so
        neither their dead marks (cleared only by their watchers) nor their slots outlive them."""
        for e in self.engines:
            e.alive, e.active = True, 0
        self.sticky.clear()
        self.context.clear()
        self._warned.clear()

    def mark_alive(self, index: int) -> None:
        self.engines[index].alive = True
        self._warned.discard(self.engines[index].pool)

    def observe(self, engine_stats: list[dict]) -> None:
        """Feeds the engines' cumulative per-task counters (EngineHost.stats, index-aligned with
        the engines) to the decode averages.

        Diffed per engine, then summed: a restarted engine's counters begin again at 0, and
        diffing the sums over all engines made its lost history look like (or hide) a
        window's traffic. A counter lower than last time is such a restart: all of it is new.
        """
        deltas: dict[str, list[float]] = {}
        for i, s in enumerate(engine_stats):
            for task, t in (s.get("per_task") or {}).items():
                cur = (float(t.get("requests", 0.0)), float(t.get("decode_tokens", 0.0)))
                prev = self._seen.get((i, task), (0.0, 0.0))
                self._seen[(i, task)] = cur
                restarted = cur[0] < prev[0] or cur[1] < prev[1]
                acc = deltas.setdefault(task, [0.0, 0.0])
                acc[0] += cur[0] if restarted else cur[0] - prev[0]
                acc[1] += cur[1] if restarted else cur[1] - prev[1]
        for task, (requests, decode) in deltas.items():
            demand = self.demand.setdefault(task, TaskDemand(self.decode_prior.get(task, DEFAULT_DECODE_PRIOR)))
            demand.update(requests, decode)

    # -- views ---------------------------------------------------------------------------------
    def pool_hardware(self) -> dict[str, str]:
        hw: dict[str, str] = {}
        for e in self.engines:
            hw.setdefault(e.pool, e.hardware)
        return hw

    def snapshot(self) -> dict:
        return {
            "policy": self.policy,
            "engines": [{"index": e.index, "pool": e.pool, "hardware": e.hardware, "alive": e.alive,
                         "active": e.active, "assigned_total": e.assigned_total} for e in self.engines],
            "routed": {t: dict(p) for t, p in self.routed.items()},
            "fallbacks": self.fallbacks,
            "fallbacks_by_pool": dict(self.fallbacks_by_pool),
            "decode_per_request": {t: d.decode_per_request for t, d in self.demand.items()},
            "decisions": {t: dict(d) for t, d in self.decisions.items()},
        }


class Router:
    """Ray actor around a RoutingTable, shared by all trajectory workers."""

    def __init__(self, engines: list[tuple[str, str]], task_pools: dict[str, str], policy: str = "affinity",
                 hardware: Mapping[str, Any] | None = None, decode_prior: dict[str, float] | None = None,
                 default_pool: str = "default", prices: Mapping[str, float] | None = None):
        cost_model = _cost_model(hardware) if hardware else None
        self.table = RoutingTable([EngineSlot(i, pool, hw) for i, (pool, hw) in enumerate(engines)], task_pools,
                                  default_pool=default_pool, policy=policy, cost_model=cost_model,
                                  decode_prior=dict(decode_prior or {}),
                                  pool_prices={p: float(v) for p, v in (prices or {}).items()})

    def assign(self, task: str, traj_id: str, prompt_tokens: int = 0) -> int:
        return self.table.assign(task, traj_id, prompt_tokens)

    def release(self, traj_id: str) -> None:
        self.table.release(traj_id)

    def assign_many(self, requests: list[tuple[str, str, int]]) -> list[int]:
        """Several (task, traj_id, prompt_tokens) at once, decided in order (one actor call)."""
        return [self.table.assign(task, traj_id, prompt_tokens) for task, traj_id, prompt_tokens in requests]

    def notify_many(self, notes: list[tuple]) -> None:
        """Assignments already made by a worker (one engine, nothing to decide) and
        releases, applied in the order they happened (CoalescingRouterClient)."""
        for note in notes:
            if note[0] == "release":
                self.table.release(note[1])
                continue
            self.table.told(*note[1:])

    def mark_dead(self, index: int) -> None:
        self.table.mark_dead(index)

    def mark_alive(self, index: int) -> None:
        self.table.mark_alive(index)

    def reset(self) -> None:
        self.table.reset()

    def observe(self, engine_stats: list[dict]) -> None:
        self.table.observe(engine_stats)

    def snapshot(self) -> dict:
        return self.table.snapshot()


def _cost_model(hardware: Mapping[str, Any]) -> CostModel:
    if all(isinstance(v, Mapping) for v in hardware.values()):
        return CostModel.from_dicts(hardware)
    return CostModel.from_specs(hardware)


def router_kwargs(cfg: Any) -> dict:
    """The Router's constructor arguments for a Config: its pools, task map, policy, cost model and prices."""
    from roll_agentic.config import effective_pools

    return {
        "engines": [(p.name, p.hardware) for p in effective_pools(cfg) for _ in range(p.num_engines)],
        "task_pools": {t.name: t.pool for t in cfg.tasks},
        "policy": cfg.router.policy,
        "hardware": {name: {"prefill_tokens_per_s": h.prefill_tokens_per_s,
                            "decode_tokens_per_s": h.decode_tokens_per_s, "price_per_hour": h.price_per_hour}
                     for name, h in cfg.router.hardware.items()},
        "decode_prior": {t.name: float(t.max_new_tokens) for t in cfg.tasks},
        # the prices the step metrics bill each pool at (train/step_metrics.py): routing costs the same
        "prices": {p.name: float(p.price_per_hour) for p in effective_pools(cfg)},
    }
