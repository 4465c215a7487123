"""Routing trajectories to engines: pool by task, then least loaded, then sticky.

A trajectory is assigned once, when it starts, and keeps its engine for every
turn (its prefix cache lives there). Each task names a pool (RollArt's
hardware affinity); tasks without one, and tasks whose pool has no live
engine, go to the default pool, and the fallback is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EngineSlot:
    index: int
    pool: str
    hardware: str
    alive: bool = True
    active: int = 0  # trajectories assigned and not yet released
    assigned_total: int = 0


@dataclass
class RoutingTable:
    """Pure routing state; the Router actor wraps it (kept separate to test without Ray)."""

    engines: list[EngineSlot]
    task_pools: dict[str, str]
    default_pool: str = "default"
    sticky: dict[str, int] = field(default_factory=dict)
    routed: dict[str, dict[str, int]] = field(default_factory=dict)  # task -> pool -> count
    fallbacks: int = 0

    def assign(self, task: str, traj_id: str) -> int:
        if traj_id in self.sticky and self.engines[self.sticky[traj_id]].alive:
            return self.sticky[traj_id]
        pool = self.task_pools.get(task, self.default_pool)
        live = [e for e in self.engines if e.pool == pool and e.alive]
        if not live:
            if pool != self.default_pool:
                self.fallbacks += 1
            live = [e for e in self.engines if e.pool == self.default_pool and e.alive]
        if not live:
            live = [e for e in self.engines if e.alive]
        if not live:
            raise RuntimeError("no live rollout engine in any pool")
        chosen = min(live, key=lambda e: (e.active, e.assigned_total))
        chosen.active += 1
        chosen.assigned_total += 1
        self.sticky[traj_id] = chosen.index
        by_pool = self.routed.setdefault(task, {})
        by_pool[chosen.pool] = by_pool.get(chosen.pool, 0) + 1
        return chosen.index

    def release(self, traj_id: str) -> None:
        index = self.sticky.pop(traj_id, None)
        if index is not None:
            self.engines[index].active = max(0, self.engines[index].active - 1)

    def mark_dead(self, index: int) -> None:
        slot = self.engines[index]
        slot.alive = False
        for traj, i in list(self.sticky.items()):
            if i == index:
                del self.sticky[traj]
        slot.active = 0

    def mark_alive(self, index: int) -> None:
        self.engines[index].alive = True

    def snapshot(self) -> dict:
        return {
            "engines": [{"index": e.index, "pool": e.pool, "alive": e.alive, "active": e.active,
                         "assigned_total": e.assigned_total} for e in self.engines],
            "routed": {t: dict(p) for t, p in self.routed.items()},
            "fallbacks": self.fallbacks,
        }


class Router:
    """Ray actor around a RoutingTable, shared by all trajectory workers."""

    def __init__(self, engines: list[tuple[str, str]], task_pools: dict[str, str]):
        self.table = RoutingTable([EngineSlot(i, pool, hw) for i, (pool, hw) in enumerate(engines)], task_pools)

    def assign(self, task: str, traj_id: str) -> int:
        return self.table.assign(task, traj_id)

    def release(self, traj_id: str) -> None:
        self.table.release(traj_id)

    def mark_dead(self, index: int) -> None:
        self.table.mark_dead(index)

    def mark_alive(self, index: int) -> None:
        self.table.mark_alive(index)

    def snapshot(self) -> dict:
        return self.table.snapshot()
