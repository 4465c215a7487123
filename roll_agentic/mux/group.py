"""Co-execution groups and the book that keeps them.

A group G = (jobs, rollout nodes, training nodes, pinning of each job to
nodes). Nodes belong to exactly one group; a node is opened when a placement
asks for it and released when the last job pinned to it leaves. The book is
plain bookkeeping shared by the simulator and the real multiplexer: it
applies placements, tracks host memory, and never decides anything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from roll_agentic.mux.profile import (
    ClusterSpec,
    JobProfile,
    PhaseTimes,
    Pool,
    phase_times,
    planned,
)


class CandidateKind(StrEnum):
    PACK = "pack"  # existing nodes only: extra cost 0
    ADD_ROLLOUT = "add_rollout"  # keep the group's training nodes, open rollout nodes
    NEW_GROUP = "new_group"  # open a group of its own
    SHARE = "share"  # share some of a group's nodes, open training nodes too (not in the paper)
    COLOCATED = "colocated"  # one pool of training-class nodes does both phases


@dataclass
class Node:
    node_id: int
    pool: Pool
    mem_capacity_gb: float
    mem_used_gb: float = 0.0
    jobs: list[str] = field(default_factory=list)

    @property
    def mem_free_gb(self) -> float:
        return self.mem_capacity_gb - self.mem_used_gb


@dataclass(frozen=True)
class Pinning:
    rollout_nodes: tuple[int, ...]
    train_nodes: tuple[int, ...]
    colocated: bool = False  # rollout runs on train_nodes

    def nodes_for(self, pool_of_phase: Pool) -> tuple[int, ...]:
        if pool_of_phase is Pool.ROLLOUT and not self.colocated:
            return self.rollout_nodes
        return self.train_nodes


@dataclass(frozen=True)
class Placement:
    """Where an arriving job goes. Existing nodes by id; new nodes by count."""

    kind: CandidateKind
    group_id: int | None  # None: a new group
    rollout_nodes: tuple[int, ...] = ()
    train_nodes: tuple[int, ...] = ()
    new_rollout: int = 0
    new_train: int = 0
    extra_cost_per_hour: float = 0.0

    @property
    def colocated(self) -> bool:
        return self.kind is CandidateKind.COLOCATED


@dataclass
class Group:
    group_id: int
    nodes: dict[int, Node] = field(default_factory=dict)
    members: dict[str, JobProfile] = field(default_factory=dict)
    pinning: dict[str, Pinning] = field(default_factory=dict)  # insertion order = RR order
    version: int = 0  # bumped on every change of members or pinning: cached views key on it
    targets: int = 0  # bumped when a member's SLO target moves (`mux/slack.py`): views' budgets
    # Each member's phase times, worst case and planned, kept while its
    # profile, pinning and cluster stand: the simulator asks at every phase,
    # placement at every view it builds.
    _times: dict[str, tuple[JobProfile, Pinning, ClusterSpec, PhaseTimes, PhaseTimes]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def node_ids(self, pool: Pool) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.pool is pool]

    def cost_per_hour(self, spec: ClusterSpec) -> float:
        return sum(spec.price(n.pool) for n in self.nodes.values())

    def own_cost_per_hour(self, job_id: str, spec: ClusterSpec) -> float:
        """$/h of the nodes only `job_id` is pinned to (released if it leaves)."""
        return sum(spec.price(n.pool) for n in self.nodes.values() if n.jobs == [job_id])

    def times(self, job_id: str, spec: ClusterSpec) -> PhaseTimes:
        """Member `job_id`'s worst-case phase times on its pinning."""
        return self._member_times(job_id, spec)[3]

    def planned_times(self, job_id: str, spec: ClusterSpec) -> PhaseTimes:
        """Member `job_id`'s typical phase times on its pinning (what plans run on)."""
        return self._member_times(job_id, spec)[4]

    def _member_times(
        self, job_id: str, spec: ClusterSpec
    ) -> tuple[JobProfile, Pinning, ClusterSpec, PhaseTimes, PhaseTimes]:
        job, pin = self.members[job_id], self.pinning[job_id]
        known = self._times.get(job_id)
        if known is not None and known[0] is job and known[1] is pin and known[2] is spec:
            return known
        worst = phase_times(job, len(pin.rollout_nodes), len(pin.train_nodes), pin.colocated, spec)
        known = self._times[job_id] = (job, pin, spec, worst, planned(worst, job))
        return known


def other_form(group: Group, form: str) -> str:
    """A member's trainer form other than `form` (`JobProfile.form`; "" is any), "" if none:
    a job of `form` may not join the group, whose training nodes it would share."""
    if form:
        for m in group.members.values():
            if m.form and m.form != form:
                return m.form
    return ""


def group_cycle_and_load(group: Group, spec: ClusterSpec) -> tuple[float, float]:
    """(T_cycle, T_load) of a group, MECHANISMS.md section 2 step 2.

    T_cycle = max_j solo iteration; T_load = the busiest node's phase time per
    meta-iteration, warm switches included (a sum over the one training node
    in the paper, over every node here since jobs may pin to subsets).
    Typical phase lengths, like every plan (`profile.planned`).
    """
    cycle = 0.0
    load: dict[int, float] = {}
    for job_id, pin in group.pinning.items():
        t = group.planned_times(job_id, spec)
        cycle = max(cycle, t.iter_s)
        for nid in pin.nodes_for(Pool.ROLLOUT):
            load[nid] = load.get(nid, 0.0) + t.roll_node_s + spec.warm_switch_s
        for nid in pin.train_nodes:
            load[nid] = load.get(nid, 0.0) + t.train_s + spec.warm_switch_s
    return cycle, max(load.values(), default=0.0)


def is_saturated(group: Group, spec: ClusterSpec) -> bool:
    cycle, load = group_cycle_and_load(group, spec)
    return load >= cycle


class GroupBook:
    """All groups of a cluster, with node ids allocated in a fixed order."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.groups: dict[int, Group] = {}
        self.job_group: dict[str, int] = {}
        self._next_group = 0
        self._next_node = 0
        # With a set here: the groups whose members or pinning changed since
        # the caller last cleared it (the simulator screens their members
        # for moves). None: not kept.
        self.touched: set[int] | None = None

    @classmethod
    def scratch(cls, groups: Mapping[int, Group], spec: ClusterSpec) -> GroupBook:
        """A private copy of `groups` to plan on; the ids it hands out lie above every existing one."""
        book = cls(spec)
        book.groups = copy.deepcopy(dict(groups))
        book.job_group = {j: gid for gid, g in book.groups.items() for j in g.members}
        book._next_group = max(book.groups, default=-1) + 1
        book._next_node = max((n for g in book.groups.values() for n in g.nodes), default=-1) + 1
        return book

    def apply(self, placement: Placement, job: JobProfile) -> tuple[Group, list[Node]]:
        """Pin `job` as `placement` says; returns its group and the nodes opened."""
        if placement.group_id is None:
            group = Group(self._next_group)
            self.groups[group.group_id] = group
            self._next_group += 1
        else:
            group = self.groups[placement.group_id]
        opened: list[Node] = []
        rollout = list(placement.rollout_nodes)
        train = list(placement.train_nodes)
        for pool, count, ids in (
            (Pool.ROLLOUT, placement.new_rollout, rollout),
            (Pool.TRAIN, placement.new_train, train),
        ):
            for _ in range(count):
                node = Node(self._next_node, pool, self.spec.node_class(pool).host_mem_gb)
                self._next_node += 1
                group.nodes[node.node_id] = node
                opened.append(node)
                ids.append(node.node_id)
        pin = Pinning(tuple(rollout), tuple(train), colocated=placement.colocated)
        for nid in set(pin.rollout_nodes):
            group.nodes[nid].mem_used_gb += job.rollout_mem_gb
            group.nodes[nid].jobs.append(job.job_id)
        for nid in pin.train_nodes:
            node = group.nodes[nid]
            node.mem_used_gb += job.train_mem_gb
            if job.job_id not in node.jobs:
                node.jobs.append(job.job_id)
        group.members[job.job_id] = job
        group.pinning[job.job_id] = pin
        group.version += 1
        if self.touched is not None:
            self.touched.add(group.group_id)
        self.job_group[job.job_id] = group.group_id
        return group, opened

    def remove(self, job_id: str) -> list[Node]:
        """Unpin a finished job; returns the nodes it leaves empty (released)."""
        group = self.groups[self.job_group.pop(job_id)]
        job = group.members.pop(job_id)
        pin = group.pinning.pop(job_id)
        group._times.pop(job_id, None)
        group.version += 1
        if self.touched is not None:
            self.touched.add(group.group_id)
        released: list[Node] = []
        for nid in set(pin.rollout_nodes) | set(pin.train_nodes):
            node = group.nodes[nid]
            if nid in pin.train_nodes:
                node.mem_used_gb -= job.train_mem_gb
            if nid in pin.rollout_nodes and not pin.colocated:
                node.mem_used_gb -= job.rollout_mem_gb
            node.jobs.remove(job_id)
            if not node.jobs:
                released.append(group.nodes.pop(nid))
        if not group.members:
            del self.groups[group.group_id]
        return released

    def repin_rollout(self, job_id: str, rollout_nodes: tuple[int, ...]) -> list[Node]:
        """Pin a member's rollouts to other nodes of its group (it keeps its training
        nodes and its place in the round robin); returns the nodes left empty (released)."""
        group = self.groups[self.job_group[job_id]]
        job, pin = group.members[job_id], group.pinning[job_id]
        new, old = set(rollout_nodes), set(pin.rollout_nodes)
        if pin.colocated or not new or len(new) != len(rollout_nodes) or any(
            n not in group.nodes or group.nodes[n].pool is not Pool.ROLLOUT for n in new
        ):
            raise ValueError(f"{job_id}: cannot run its rollouts on nodes {rollout_nodes}")
        released: list[Node] = []
        for nid in sorted(new - old):
            group.nodes[nid].mem_used_gb += job.rollout_mem_gb
            group.nodes[nid].jobs.append(job_id)
        for nid in sorted(old - new):
            node = group.nodes[nid]
            node.mem_used_gb -= job.rollout_mem_gb
            node.jobs.remove(job_id)
            if not node.jobs:
                released.append(group.nodes.pop(nid))
        group.pinning[job_id] = Pinning(rollout_nodes, pin.train_nodes)  # same key: same turn order
        group.version += 1
        if self.touched is not None:
            self.touched.add(group.group_id)
        return released

    def retarget_slo(self, job_id: str, slo: float) -> JobProfile:
        """Give a member a new SLO target (banked slack, `mux/slack.py`); its pins stay."""
        group = self.groups[self.job_group[job_id]]
        profile = replace(group.members[job_id], slo=slo)
        group.members[job_id] = profile
        group.targets += 1  # plans and loads stand; views refresh their SLO budget
        return profile

    def cost_per_hour(self) -> float:
        return sum(g.cost_per_hour(self.spec) for g in self.groups.values())
