"""Node classes and job profiles: the numbers every placement decision reads.

Model assumptions (RollMux, MECHANISMS.md section 2), shared by the policies,
the simulator and, later, the real multiplexer:

- A node is 8 GPUs of one class. Rollout nodes are bandwidth-rich and cheap
  (H20-class), training nodes compute-rich and dear (H800-class); an H800
  GPU-hour costs 2.85x an H20 GPU-hour. A node is paid for from the moment a
  group opens it until the last job pinned to it leaves.
- A job profile is *conservative*: `roll_s` and `train_s` are the phase
  times measured with every response at the maximum token limit, on the
  job's own `n_rollout` rollout nodes and `n_train` training nodes. Real
  phases are never longer than the profile.
- A job's state lives in the host memory of every node it is pinned to
  (`train_mem_gb` per training node: bf16 weights and fp32 Adam state;
  `rollout_mem_gb` per rollout node: bf16 weights). While it is resident a
  phase switch onto that node is warm (`warm_switch_s`); otherwise cold.
- Weight sync after training crosses the slow inter-pool link (`sync_s`) and
  holds no GPU: trainers push weights to the rollout nodes' host memory.
  When rollout runs on the training GPUs themselves (co-located), sync is a
  local reshard (`local_sync_s`).
- Phase time scales inversely with node count, with `scale_efficiency` lost
  on each node added beyond the profiled count.
- Plans compare ratios (co-run period over solo iteration), and the worst
  case does not bound a ratio: a rollout-heavy job whose real rollouts run
  at 85 % of the cap, grouped behind training phases that run at 92 %, is
  slowed more than its worst-case plan says (measured: planned 1.03x, ran
  1.15x). So the profile also records the typical length of each phase as
  a fraction of its worst case (`roll_typical`, `train_typical`: the mean
  over the profiling iterations), and plans run on those (`planned`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar


class Pool(StrEnum):
    ROLLOUT = "rollout"
    TRAIN = "train"


class PhaseKind(StrEnum):
    ROLLOUT = "rollout"
    TRAIN = "train"
    SYNC = "sync"


@dataclass(frozen=True)
class NodeClass:
    name: str
    gpus_per_node: int
    price_per_gpu_hour: float  # $ per GPU-hour
    host_mem_gb: float  # host DRAM that can hold resident job state

    @property
    def price_per_hour(self) -> float:
        return self.gpus_per_node * self.price_per_gpu_hour


# Prices are relative: only the H800/H20 ratio (2.85) shapes any decision.
H20 = NodeClass("H20", gpus_per_node=8, price_per_gpu_hour=1.0, host_mem_gb=1024.0)
H800 = NodeClass("H800", gpus_per_node=8, price_per_gpu_hour=2.85, host_mem_gb=1024.0)


@dataclass(frozen=True)
class ClusterSpec:
    rollout: NodeClass = H20
    train: NodeClass = H800
    # Warm start = host DRAM -> device; the paper measured up to 135 s cold
    # from storage on an 8-GPU node and a warm switch up to 71.5x faster.
    warm_switch_s: float = 135.0 / 71.5
    cold_switch_s: float = 135.0
    scale_efficiency: float = 0.9
    # Long-tail migration (`migration.py`): once most of a rollout's
    # responses are done its stragglers move onto a few GPUs and the rest
    # start the next rollout queued on those nodes. Plans and the simulator
    # then hold a job's rollout nodes for `JobProfile.tail_hold` of its
    # phase. Off by default: the real multiplexer does not migrate yet.
    migration: bool = False
    # Rollout nodes serve queued rollouts first come, first served instead of
    # in turns (training nodes keep theirs). Turns lock every job that shares
    # a node to the slowest one's pace (`round_robin.locked_periods`), so a
    # rollout node shared by jobs on different training nodes slows the
    # faster ones to the slowest; with migration a rollout holds its nodes
    # for about a third of its length, and a short wait in a queue costs
    # less. Not in the paper; off by default (`sim compare --rollout-fifo`).
    rollout_fifo: bool = False
    # A job may run its rollouts on fewer rollout nodes than it was
    # profiled on, down to one, when its SLO allows the longer rollout: the
    # objective is the cheapest placement within every SLO, and the
    # colocated baseline sizes its nodes the same way. In a group whose
    # training nodes are busy, a member's rollout waits behind the others'
    # training anyway. A joining job may take fewer (`mux/placement.py`),
    # and a member drops nodes only it uses once its group no longer needs
    # them, or moves its rollouts onto partners' nodes (`mux/trim.py`);
    # all are scored with slowdowns priced in. On the 200-job trace, seeds
    # 0-4: mean 1.62x cheaper than solo and 1.32x than colocated, against
    # 1.54x and 1.26x without (`sim compare --full-rollout`), SLOs all met.
    rollout_shrink: bool = True

    def node_class(self, pool: Pool) -> NodeClass:
        return self.rollout if pool is Pool.ROLLOUT else self.train

    def price(self, pool: Pool) -> float:
        return self.node_class(pool).price_per_hour


@dataclass(frozen=True)
class JobProfile:
    job_id: str
    kind: str  # "balanced" | "rollout_heavy" | "train_heavy"
    size: str  # "small" | "medium" | "large"
    n_rollout: int  # rollout nodes the job was profiled on
    n_train: int  # training nodes the job was profiled on
    roll_s: float  # worst-case rollout phase on n_rollout nodes
    train_s: float  # worst-case training phase on n_train nodes
    sync_s: float  # weight sync across the inter-pool link
    local_sync_s: float  # weight reshard when rollout shares the training GPUs
    train_mem_gb: float  # resident state per training node
    rollout_mem_gb: float  # resident state per rollout node
    slo: float  # tolerated slowdown of an iteration versus running alone
    # Rollout throughput of one training-class GPU relative to one
    # rollout-class GPU for this job's prefill/decode mix (co-located runs).
    colo_roll_speed: float = 1.0
    # Typical phase length as a fraction of the worst case (1.0: plan on it).
    roll_typical: float = 1.0
    train_typical: float = 1.0
    # With migration: the share of a rollout phase for which its nodes are
    # held whole, stragglers' GPUs counted pro rata (`migration.tail_hold`).
    tail_hold: float = 1.0
    # The kind of trainer its state needs ("" for any): the multiplexer's "full" or "lora"
    # (`admission.placement_form`), a trace's any text. A switch between forms would rebuild
    # the trainer from storage, a cold start the SLO check does not price, so jobs of
    # different forms never join one group (`group.other_form`).
    form: str = ""

    @property
    def solo_iter_s(self) -> float:
        return self.roll_s + self.sync_s + self.train_s

    @property
    def planned_iter_s(self) -> float:
        """A typical solo iteration: what SLO checks divide by."""
        return self.roll_s * self.roll_typical + self.sync_s + self.train_s * self.train_typical

    def solo_cost_per_hour(self, spec: ClusterSpec) -> float:
        return self.n_rollout * spec.price(Pool.ROLLOUT) + self.n_train * spec.price(Pool.TRAIN)


def _number(value: object) -> float | None:
    """`value` as a finite float, or None (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


# What each numeric field of a profile may hold: (lowest, highest, lowest itself allowed, in words).
FIELD_RANGES: dict[str, tuple[float, float, bool, str]] = {
    "roll_s": (0.0, math.inf, False, "seconds of a worst-case rollout, > 0"),
    "train_s": (0.0, math.inf, False, "seconds of a worst-case training phase, > 0"),
    "sync_s": (0.0, math.inf, True, "seconds of a weight sync, >= 0"),
    "local_sync_s": (0.0, math.inf, True, "seconds of a local reshard, >= 0"),
    "train_mem_gb": (0.0, math.inf, True, "GB of host memory per training node, >= 0"),
    "rollout_mem_gb": (0.0, math.inf, True, "GB of host memory per rollout node, >= 0"),
    "slo": (1.0, math.inf, True, "a tolerated slowdown versus running alone, >= 1 (1: none)"),
    "colo_roll_speed": (0.0, math.inf, False, "a speed ratio, > 0"),
    "roll_typical": (0.0, 1.0, False, "a fraction of the worst case, in (0, 1]"),
    "train_typical": (0.0, 1.0, False, "a fraction of the worst case, in (0, 1]"),
    "tail_hold": (0.0, 1.0, False, "a share of the rollout, in (0, 1]"),
}


def out_of_range(name: str, value: object, rule: tuple[float, float, bool, str]) -> str | None:
    """`name must be <what>, got <value>` if `value` breaks `rule` (a `FIELD_RANGES` entry)."""
    low, high, closed, what = rule
    x = _number(value)
    if x is None or x > high or x < low or (x == low and not closed):
        return f"{name} must be {what}, got {value!r}"
    return None


def profile_problems(job: JobProfile, spec: ClusterSpec | None = None) -> list[str]:
    """What is wrong with a profile that came from outside (a trace file); [] if nothing.

    With `spec`, also whether its state fits one node's host memory: a job
    that fits no node would run nowhere in a real cluster.
    """
    out = []
    if not isinstance(job.job_id, str) or not job.job_id:
        out.append(f"job_id must be a non-empty string, got {job.job_id!r}")
    for name in ("n_rollout", "n_train"):
        value = getattr(job, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            out.append(f"{name} must be a whole number of nodes >= 1, got {value!r}")
    for name, rule in FIELD_RANGES.items():
        problem = out_of_range(name, getattr(job, name), rule)
        if problem:
            out.append(problem)
    if not isinstance(job.form, str):
        out.append(f"form must be a string naming the trainer form (\"\": any), got {job.form!r}")
    if spec is not None and not out:
        for pool, need in ((Pool.TRAIN, job.train_mem_gb), (Pool.ROLLOUT, job.rollout_mem_gb)):
            have = spec.node_class(pool).host_mem_gb
            if need > have:
                where = "training" if pool is Pool.TRAIN else "rollout"
                out.append(
                    f"needs {need:g} GB of host memory per {where} node; "
                    f"one {spec.node_class(pool).name} node has {have:g} GB"
                )
    return out


def _scaled(base_s: float, base_nodes: float, nodes: int, efficiency: float) -> float:
    """Phase time on `nodes` nodes for a phase profiled on `base_nodes`."""
    if nodes <= base_nodes:
        return base_s * base_nodes / nodes
    # Each node beyond the profiled count contributes only `efficiency` of one.
    effective = base_nodes + (nodes - base_nodes) * efficiency
    return base_s * base_nodes / effective


_T = TypeVar("_T")


class _once(Generic[_T]):  # noqa: N801 (used as a decorator, like `property`)
    """A value computed from a frozen instance on first read, then kept on it.

    `functools.cached_property` without its lock: on Python 3.11 its first
    read takes one, about 1 us, and placement builds phase times by the
    thousand (4 % of the default's scheduler time on 2,000 jobs).
    """

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.name: str = fn.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self.fn(obj)
        obj.__dict__[self.name] = value  # an instance attribute from now on
        return value


@dataclass(frozen=True)
class PhaseTimes:
    roll_s: float
    train_s: float
    sync_s: float
    # How long the rollout holds its nodes before the next job's rollout
    # may start on them (< roll_s with long-tail migration); None: roll_s.
    roll_hold_s: float | None = None

    # Computed once (frozen: they never change): every round-robin run, bound
    # and ranking reads them.
    @_once
    def roll_node_s(self) -> float:
        return self.roll_s if self.roll_hold_s is None else self.roll_hold_s

    @_once
    def iter_s(self) -> float:
        return self.roll_s + self.sync_s + self.train_s


def phase_times(
    job: JobProfile, n_rollout: int, n_train: int, colocated: bool, spec: ClusterSpec
) -> PhaseTimes:
    """Worst-case phase times of `job` on a given allocation.

    Co-located: the rollout runs on the `n_train` training-class nodes, whose
    per-GPU rollout speed is `colo_roll_speed` times a rollout-class GPU.
    """
    eff = spec.scale_efficiency
    if colocated:
        roll_equiv = job.n_rollout / job.colo_roll_speed  # training nodes doing the same work
        return PhaseTimes(
            roll_s=_scaled(job.roll_s, roll_equiv, n_train, eff),
            train_s=_scaled(job.train_s, job.n_train, n_train, eff),
            sync_s=job.local_sync_s,
        )
    roll_s = _scaled(job.roll_s, job.n_rollout, n_rollout, eff)
    return PhaseTimes(
        roll_s=roll_s,
        train_s=_scaled(job.train_s, job.n_train, n_train, eff),
        sync_s=job.sync_s,
        roll_hold_s=roll_s * job.tail_hold if spec.migration and job.tail_hold < 1.0 else None,
    )


def planned(times: PhaseTimes, job: JobProfile) -> PhaseTimes:
    """Worst-case phase times scaled to their typical lengths (what plans run on)."""
    hold = None if times.roll_hold_s is None else times.roll_hold_s * job.roll_typical
    return PhaseTimes(
        times.roll_s * job.roll_typical, times.train_s * job.train_typical, times.sync_s, hold
    )
