"""What a simulated run returns: node allocations, job outcomes, busy time, phases.

Costs and SLO attainment are read from these, never hard-coded: a node
costs its price from opening to closing, and a job attains its SLO when its
time from arrival to the end of its last completed iteration is within SLO
x the same iterations run alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roll_agentic.mux.profile import ClusterSpec, Pool


@dataclass
class PhaseRecord:
    node_id: int
    pool: str
    job_id: str
    kind: str
    start: float
    end: float  # when the node passed on: a migrated rollout's stragglers run on past it


@dataclass
class Allocation:
    node_id: int
    pool: str
    price_per_hour: float
    opened: float
    closed: float = float("nan")


@dataclass
class JobOutcome:
    job_id: str
    arrival: float
    end: float  # end of the last completed iteration (incl. its sync)
    iters_done: int
    n_iters: int
    solo_s: float  # the same iterations run alone
    slo: float

    @property
    def slowdown(self) -> float:
        return (self.end - self.arrival) / self.solo_s if self.solo_s > 0 else float("inf")

    @property
    def attained(self) -> bool:
        return self.iters_done > 0 and self.slowdown <= self.slo + 1e-9


@dataclass
class SimResult:
    policy: str
    allocations: list[Allocation]
    jobs: list[JobOutcome]
    busy_gpu_s: dict[str, float]
    scheduler_time_s: float
    end_time: float
    phases: list[PhaseRecord] = field(default_factory=list)
    regroup_time_s: float = 0.0  # policy CPU time spent offering lone jobs a move
    moves: int = 0  # jobs moved to another group between iterations
    replan_time_s: float = 0.0  # policy CPU time spent re-placing running jobs (`replan.py`)
    replans: int = 0  # re-plans adopted
    # $ per group size ("1", "2", "3", "4+") and, for groups of one, per the
    # job's SLO band (`census.py`); each adds up to `total_cost`.
    cost_by_group_size: dict[str, float] = field(default_factory=dict)
    alone_cost_by_slo: dict[str, float] = field(default_factory=dict)

    @property
    def total_cost(self) -> float:
        return sum(self.pool_cost().values())

    def pool_cost(self) -> dict[str, float]:
        """Node cost per pool over the run ($, node-hours x price): where the money goes."""
        out = {p.value: 0.0 for p in Pool}
        for a in self.allocations:
            out[a.pool] += a.price_per_hour * (a.closed - a.opened) / 3600.0
        return out

    def node_gpu_s(self, spec: ClusterSpec) -> dict[str, float]:
        out = {p.value: 0.0 for p in Pool}
        for a in self.allocations:
            out[a.pool] += (a.closed - a.opened) * spec.node_class(Pool(a.pool)).gpus_per_node
        return out

    def utilization(self, spec: ClusterSpec) -> float:
        alloc = sum(self.node_gpu_s(spec).values())
        return sum(self.busy_gpu_s.values()) / alloc if alloc > 0 else 0.0

    def pool_utilization(self, spec: ClusterSpec) -> dict[str, float | None]:
        """Busy share of the allocated GPU time, per pool (where the idle time sits); None: none allocated."""
        alloc = self.node_gpu_s(spec)
        return {p: self.busy_gpu_s[p] / a if a > 0 else None for p, a in alloc.items()}

    @property
    def slo_attainment(self) -> float:
        return sum(j.attained for j in self.jobs) / len(self.jobs) if self.jobs else 1.0
