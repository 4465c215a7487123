"""Periodic re-planning: re-place running jobs from scratch, move them between iterations.

Beyond the paper, which places a job once, on arrival. Jobs then leave at
their own times, and the groups they leave behind keep their shape;
`sim repack` measures what that costs (the running jobs of the 200-job
trace, re-placed at once, would cost 1.14-1.18x less). Every
`RollMuxPolicy.replan_every_h` hours the simulator asks the policy for a
fresh placement of the running jobs of the groups that save least
(`worst_groups`, at least `RollMuxPolicy.replan_jobs` jobs;
`RollMuxPolicy.replan_plan`: one plan, dearest first, or a batch search), and
adopts it when it is cheaper by `replan_margin` ($/h per unit of progress
over those groups, on plans):

- groups the plan keeps as they are (same members, same sharing) stay put;
- every other job moves to its planned group at the end of its current
  iteration (its nodes are idle then), paying a cold start per phase on
  the new nodes; a planned group's nodes open when its first member
  arrives, in the plan's round-robin order, and no other job is placed
  into it until its members are in;
- a job whose SLO could not absorb the move (`move_keeps_slo`) stays.

This module keeps the bookkeeping; the simulator does the moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from roll_agentic.mux.batch import GroupAssessor, apply_batch, signature
from roll_agentic.mux.group import CandidateKind, Group, GroupBook, Pinning, Placement
from roll_agentic.mux.profile import ClusterSpec, JobProfile

_NONE: frozenset[int] = frozenset()

PlanKey = tuple[int, int]  # (re-plan number, group id in that plan)


@dataclass(frozen=True)
class Target:
    key: PlanKey
    pin: Pinning  # node ids of the plan's scratch book
    order: float  # round-robin position: after every job that joined before the re-plan


def move_keeps_slo(
    profile: JobProfile,
    elapsed_s: float,
    done_solo_s: float,
    iters_left: int,
    spec: ClusterSpec,
    headroom: float,
) -> bool:
    """Would a move still leave the job inside its SLO?

    The rest is taken to run at the slowest pace a plan allows. Plans do not
    see cold starts, so the move is charged a cold start per phase and two
    iterations more: its new partners arrive over about one, each with cold
    starts of its own. (With one iteration, one job in 2,000 missed its
    SLO on `sim scale --replan 12`; with two, none, at the same cost on the
    200-job traces.)
    """
    total = done_solo_s + iters_left * profile.planned_iter_s
    finish = elapsed_s + 2 * spec.cold_switch_s + 2 * profile.planned_iter_s
    finish += iters_left * profile.planned_iter_s * profile.slo / (1.0 + headroom)
    return finish <= profile.slo * total


def worst_groups(
    groups: Mapping[int, Group], assessor: GroupAssessor, spec: ClusterSpec, jobs: int
) -> dict[int, Group]:
    """The groups that save least over their members' solo cost, worst first, until they hold `jobs` jobs.

    A group's score is its $/h per unit of progress over its members' mean
    solo $/h: 1 for a job alone (no saving), lower the better it packs. A
    re-plan that places only these jobs costs the same however large the
    cluster grows.
    """

    def waste(g: Group) -> float:
        rate = assessor.assess(g)[1]
        solo = sum(p.solo_cost_per_hour(spec) for p in g.members.values())
        return (g.cost_per_hour(spec) / rate) / (solo / len(g.members)) if rate else float("inf")

    picked: dict[int, Group] = {}
    count = 0
    for gid, g in sorted(groups.items(), key=lambda kv: -waste(kv[1])):
        if count >= jobs:
            break
        picked[gid] = g
        count += len(g.members)
    return picked


@dataclass
class Replanner:
    margin: float
    limit: int = 0  # re-place the jobs of the worst groups, at least this many; 0: every running job
    targets: dict[str, Target] = field(default_factory=dict)
    pending: dict[PlanKey, int] = field(default_factory=dict)  # members still to move in
    group_of: dict[PlanKey, int] = field(default_factory=dict)  # real id of a formed planned group
    node_of: dict[tuple[int, int], int] = field(default_factory=dict)  # (re-plan, plan node): real
    order: dict[str, float] = field(default_factory=dict)
    replans: int = 0  # adopted

    @classmethod
    def of(cls, policy: object) -> Replanner:
        """The re-planner a policy asks for (its `replan_margin` and `replan_jobs`; none: 0)."""
        return cls(float(getattr(policy, "replan_margin", 0.0)), int(getattr(policy, "replan_jobs", 0)))

    def forming(self) -> Set[int]:
        """Real groups still waiting for planned members."""
        if not self.pending:
            return _NONE  # asked at every look at a job, re-plans or not
        return {self.group_of[k] for k in self.pending if k in self.group_of}

    def plan(
        self,
        groups: Mapping[int, Group],
        home: Mapping[str, int],
        place_jobs,
        spec: ClusterSpec,
        headroom: float,
        joins: int,
    ) -> bool:
        """Re-place the running jobs; adopt the plan if it is cheaper by `margin`.

        `place_jobs(groups, jobs)`: the plan's steps on a scratch copy of
        `groups` (`RollMuxPolicy.replan_plan`); `home`: each job's current
        group; `joins`: the next round-robin position, so planned members
        keep the plan's order among themselves and go after every job
        already running. With `limit`, only the jobs
        of the groups that save least (`worst_groups`) are re-placed.
        """
        if self.targets:
            return False
        assessor = GroupAssessor(spec, headroom)
        if self.limit:
            groups = worst_groups(groups, assessor, spec, self.limit)
        running = [p for g in groups.values() for p in g.members.values()]
        if len(running) < 2:
            return False
        current = assessor.objective(groups.values())
        plan = GroupBook(spec)
        apply_batch(plan, place_jobs(plan.groups, running))
        if assessor.objective(plan.groups.values()) >= current * (1.0 - self.margin):
            return False
        self.replans += 1
        # Every earlier plan is carried out (no target was left): forget its ids.
        self.pending.clear()
        self.group_of.clear()
        self.node_of.clear()
        for g in plan.groups.values():
            homes = {home[j] for j in g.members}
            if len(homes) == 1:
                now = groups[next(iter(homes))]
                if set(now.members) == set(g.members) and signature(now) == signature(g):
                    continue  # placed so already: nobody moves
            key = (self.replans, g.group_id)
            self.pending[key] = len(g.members)
            for i, (j, pin) in enumerate(g.pinning.items()):
                self.targets[j] = Target(key, pin, joins + i / (len(g.pinning) + 1))
        return True

    def take(self, job_id: str) -> Target | None:
        """The job's target, no longer pending (it moves now, or never)."""
        target = self.targets.pop(job_id, None)
        if target is not None:
            self.pending[target.key] -= 1
            if not self.pending[target.key]:
                del self.pending[target.key]  # formed: open to others again
        return target

    def placement(self, target: Target, groups: Mapping[int, Group]) -> tuple[Placement, list[int]]:
        """Where the job goes in the real book, and the plan's nodes it opens (in opening order)."""
        gid = self.group_of.get(target.key)
        group = groups.get(gid) if gid is not None else None
        replan = target.key[0]

        def split(ids: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]]:
            have, new = [], []
            for n in ids:
                real = self.node_of.get((replan, n))
                if group is not None and real in group.nodes:
                    have.append(real)
                else:
                    new.append(n)
            return tuple(have), new

        r_have, r_new = split(target.pin.rollout_nodes)
        t_have, t_new = split(target.pin.train_nodes)
        placement = Placement(
            CandidateKind.NEW_GROUP if group is None else CandidateKind.SHARE,
            None if group is None else group.group_id,
            rollout_nodes=r_have,
            train_nodes=t_have,
            new_rollout=len(r_new),
            new_train=len(t_new),
        )
        return placement, [*r_new, *t_new]

    def moved(
        self, job_id: str, target: Target, group: Group, plan_nodes: list[int], real_nodes: list[int]
    ) -> None:
        """Record where a move landed; keep the group's members in the plan's order."""
        replan = target.key[0]
        self.node_of.update({(replan, n): r for n, r in zip(plan_nodes, real_nodes, strict=True)})
        self.group_of[target.key] = group.group_id
        self.order[job_id] = target.order
        ranked = sorted(group.pinning, key=lambda j: self.order.get(j, float("inf")))
        group.pinning = {j: group.pinning[j] for j in ranked}
        group.members = {j: group.members[j] for j in ranked}
        group.version += 1  # a new turn order: views of the group are stale

    def left(self, job_id: str) -> None:
        """The job left its group (moved elsewhere or finished): forget its planned position."""
        self.order.pop(job_id, None)
        self.take(job_id)
