"""What placement reads of a group, computed once per membership, and its effective cost.

A view holds the group's member plans, per-node loads, cycle, SLO budget,
$/h and summed progress rate (the rate comes from a round-robin run: the
SLO check of the candidate that made the group, or one of its own). The
policy keeps one per group and rebuilds it only when the members change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from roll_agentic.mux.group import Group
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on, members_of
from roll_agentic.mux.slo_check import progress_rate

if TYPE_CHECKING:
    from roll_agentic.mux.floor_base import FloorBase


@dataclass(frozen=True)
class GroupView:
    """What placement needs of a group, computed once per membership."""

    members: tuple[str, ...]
    plans: list[MemberPlan]
    load: dict[int, float]
    cycle: float
    max_load: float
    sum_load: float
    budget: float  # min over members of SLO x solo iteration: the cycle may not pass it
    cost: float  # $/h of the group's nodes
    train_order: list[int]  # training nodes, least loaded first
    rollout_order: list[int]
    colocated: bool  # a member runs both phases on training nodes: no idle phase to share
    # Least free host memory of a node in each pool: a job needing no more
    # fits on every node of that pool, and placement skips the per-node check.
    train_room_gb: float
    rollout_room_gb: float
    version: int  # the group's `Group.version` it was built from
    targets: int  # and its `Group.targets` (the SLO targets its `budget` was taken from)
    # The members' profiles and the cluster, for `rate`; and the rate, if known when built.
    profiles: tuple[JobProfile, ...] = ()
    spec: ClusterSpec | None = None
    known_rate: float | None = None
    # What each member adds to the group's effective cost (`RollMuxPolicy.move_offer`).
    adds: dict[str, float] = field(default_factory=dict)
    # The others' summed rate without a member, where `adds` ran it: the
    # group's rate once that member has left (`RollMuxPolicy._group_view`).
    rates_without: dict[str, float] = field(default_factory=dict)
    # The members' share of its candidates' SLO bounds (`floor_base.py`), once built.
    floor_base: list[FloorBase] = field(default_factory=list)

    @cached_property
    def rate(self) -> float:
        """Summed progress rates of the members (solo iterations per co-run one).

        Taken from a round-robin run when first asked for: most views are
        built for a search whose screens reject every candidate there first.
        """
        if self.known_rate is not None:
            return self.known_rate
        assert self.spec is not None, "a view without its cluster must be built with its rate"
        periods = evaluate_on(self.plans, self.spec) if len(self.plans) > 1 else []
        return progress_rate(periods, list(self.profiles), self.plans)

    def rate_if_known(self) -> float | None:
        """The rate, without a round-robin run for it."""
        return self.__dict__.get("rate", self.known_rate)


def view_of(group: Group, spec: ClusterSpec, rate: float | None = None) -> GroupView:
    """The group's view; `rate`: its members' summed progress, if already known."""
    plans = members_of(group, spec)
    load = {nid: 0.0 for nid in group.nodes}
    for m in plans:
        for n in m.rollout_nodes:
            load[n] += m.times.roll_node_s + spec.warm_switch_s
        for n in m.train_nodes:
            load[n] += m.times.train_s + spec.warm_switch_s
    cycle = max(m.times.iter_s for m in plans)
    # One pass over the nodes for both pools: ids, least free memory, $/h
    # (summed in the nodes' order, as `Group.cost_per_hour` does).
    ids: dict[Pool, list[int]] = {Pool.TRAIN: [], Pool.ROLLOUT: []}
    room = {Pool.TRAIN: float("inf"), Pool.ROLLOUT: float("inf")}
    cost = 0.0
    for nid, node in group.nodes.items():
        ids[node.pool].append(nid)
        room[node.pool] = min(room[node.pool], node.mem_free_gb)
        cost += spec.price(node.pool)

    def order(pool: Pool) -> list[int]:
        return sorted(ids[pool], key=lambda nid: (load[nid], nid))

    def least_room(pool: Pool) -> float:
        return room[pool] if ids[pool] else 0.0

    top = max(load.values())
    colocated = any(p.colocated for p in group.pinning.values())
    budget = slo_budget(group)
    return GroupView(
        tuple(group.pinning),
        plans,
        load,
        cycle,
        top,
        sum(load.values()),
        budget,
        cost,
        order(Pool.TRAIN),
        order(Pool.ROLLOUT),
        colocated,
        least_room(Pool.TRAIN),
        least_room(Pool.ROLLOUT),
        group.version,
        group.targets,
        tuple(group.members.values()),
        spec,
        rate,
    )


def slo_budget(group: Group) -> float:
    """The tightest member's SLO x its typical solo iteration: no meta-iteration may last longer."""
    return min(p.slo * p.planned_iter_s for p in group.members.values())


def effective_cost(view: GroupView, extra: float, gained: float) -> float:
    """$/h a candidate adds once slowdowns are paid for: the group's effective cost after minus before.

    A group of n members that progresses at a summed rate R keeps its nodes
    n / R times as long as its work needs at solo speed, so its effective
    cost is C * n / R; a job of its own adds its solo cost (rate 1). Members
    are taken to have equal work left, which no placement can know better.
    """
    n = len(view.members)
    return (view.cost + extra) * (n + 1) / (view.rate + gained) - view.cost * n / view.rate


class Joined(NamedTuple):
    """A group as its winning candidate left it: members, their summed progress
    rate (from its SLO check), the newcomer, and the rate before it joined
    (the others' without it: `GroupView.rates_without`)."""

    members: tuple[str, ...]
    rate: float
    job_id: str
    rate_before: float


def rate_after_leaving(view: GroupView, version: int, members: tuple[str, ...]) -> float | None:
    """The group's rate, known from `view` if its one change since was a member leaving.

    What a member adds (`rehome.member_adds`) runs the others without it;
    once it leaves (moves, or finishes) the group is those others, on the
    same nodes, so that run is the new group's.
    """
    if version != view.version + 1 or len(members) != len(view.members) - 1:
        return None
    gone = [j for j in view.members if j not in members]
    if len(gone) != 1:
        return None
    return view.rates_without.get(gone[0])
