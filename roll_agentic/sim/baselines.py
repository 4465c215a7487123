"""Baseline placement policies, each a `SchedulerPolicy` beside RollMux.

- solo: plain disaggregation, every job on dedicated rollout and training
  nodes (a new group each): the SLO reference itself.
- colocated (veRL-style): every job time-shares one pool of training-class
  nodes for both phases; it gets the fewest such nodes (at least its
  training count) whose worst-case iteration meets its SLO, or, if none up
  to `n_train + n_rollout` does, that many.
- random: a uniformly random group (or a new one), then a random
  memory-feasible pinning in it; no saturation or SLO check.
- greedy: the first group, in opening order, whose nodes have the memory
  for the job (packing before adding rollout nodes); no SLO check.
All use round robin inside a group, like RollMux, so only placement differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from roll_agentic.mux.candidates import group_candidates, new_group_placement
from roll_agentic.mux.group import CandidateKind, Group, Placement
from roll_agentic.mux.policy import RoundRobinPhases
from roll_agentic.mux.profile import ClusterSpec, JobProfile, PhaseTimes, Pool, phase_times


@dataclass
class SoloPolicy(RoundRobinPhases):
    spec: ClusterSpec
    name: str = "solo"

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        return new_group_placement(job, self.spec)


def colocated_iter_s(times: PhaseTimes, spec: ClusterSpec) -> float:
    """A co-located iteration: both phases on the same GPUs, swapping engine and trainer twice."""
    return times.iter_s + 2 * spec.warm_switch_s


def colocated_nodes(job: JobProfile, spec: ClusterSpec, headroom: float = 0.0) -> int:
    """Fewest training-class nodes that run both phases within the job's SLO."""
    cap = job.n_train + job.n_rollout
    for n in range(job.n_train, cap + 1):
        iter_s = colocated_iter_s(phase_times(job, 0, n, True, spec), spec)
        if iter_s * (1.0 + headroom) <= job.slo * job.solo_iter_s:
            return n
    return cap


@dataclass
class ColocatedPolicy(RoundRobinPhases):
    spec: ClusterSpec
    headroom: float = 0.05
    name: str = "colocated"

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        n = colocated_nodes(job, self.spec, self.headroom)
        return Placement(
            CandidateKind.COLOCATED,
            None,
            new_train=n,
            extra_cost_per_hour=n * self.spec.price(Pool.TRAIN),
        )


@dataclass
class RandomPolicy(RoundRobinPhases):
    spec: ClusterSpec
    seed: int = 0
    name: str = "random"
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        options = [c for g in groups.values() if (c := group_candidates(g, job, self.spec))]
        options.append([new_group_placement(job, self.spec)])
        cands = options[int(self._rng.integers(len(options)))]
        return cands[int(self._rng.integers(len(cands)))]


@dataclass
class GreedyPolicy(RoundRobinPhases):
    spec: ClusterSpec
    name: str = "greedy"

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        for group in groups.values():
            cands = group_candidates(group, job, self.spec)
            if cands:
                return cands[0]  # fewest new rollout nodes first
        return new_group_placement(job, self.spec)
