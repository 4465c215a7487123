"""Moving a running job to a group where it costs less (between its iterations).

RollMux places a job once, on arrival, with the groups of that moment; jobs
leave and arrive later, and a job placed well then may later be the one
that slows its group most, while a group where it would fit has opened.
Between two of its iterations (its nodes hold none of its phases) a job
may move: it is offered to other groups with the same checks as an
arrival, and it moves when it would add less *effective* cost there
(`group_view.effective_cost`) than it adds where it is, by a margin that
pays for the move's cold starts. A job alone in its group adds its whole
group's cost; the earlier lone-job regrouping is the special case.

What a member adds where it is: the group's effective cost C n / R minus
the same without it (its own nodes released, the others' rate taken from
a round-robin run without it), kept per group membership. Beyond the
paper, which places on arrival only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roll_agentic.mux.group import Group, Placement
from roll_agentic.mux.group_view import GroupView
from roll_agentic.mux.profile import ClusterSpec, JobProfile
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on
from roll_agentic.mux.slo_bound import period_floors
from roll_agentic.mux.slo_check import progress_rate

if TYPE_CHECKING:
    from roll_agentic.mux.placement import RollMuxPolicy


@dataclass(frozen=True)
class MoveOffer:
    placement: Placement | None  # where to go; None: stay
    # It adds less than the margin where it is: no offer can pay for a
    # move until its own group changes, so the caller need not ask before.
    content: bool = False


def member_adds(view: GroupView, group: Group, job_id: str, spec: ClusterSpec) -> float:
    """Effective $/h the member adds to its group (cached on the view)."""
    known = view.adds.get(job_id)
    if known is not None:
        return known
    n = len(view.members)
    if n == 1:
        adds = view.cost
    else:
        own = group.own_cost_per_hour(job_id, spec)
        rate = view.rates_without.get(job_id)  # known if it joined last (`RollMuxPolicy._group_view`)
        if rate is None:
            rest, profiles = _others(view, group, job_id)
            periods = evaluate_on(rest, spec) if len(rest) > 1 else []
            rate = view.rates_without[job_id] = progress_rate(periods, profiles, rest)
        adds = view.cost * n / view.rate - (view.cost - own) * (n - 1) / rate
    view.adds[job_id] = adds
    return adds


def _others(view: GroupView, group: Group, job_id: str) -> tuple[list[MemberPlan], list[JobProfile]]:
    """The group's members but `job_id`: their plans and profiles."""
    plans = [m for j, m in zip(view.members, view.plans, strict=True) if j != job_id]
    return plans, [p for j, p in group.members.items() if j != job_id]


def member_adds_at_most(
    view: GroupView, group: Group, job_id: str, spec: ClusterSpec, enough: float = float("-inf")
) -> float:
    """An upper bound on `member_adds`, with no round-robin run.

    Without the member, each other one progresses at most at the pace its
    period's lower bound allows (`slo_bound.period_floors`: its own plan,
    its busiest shared training node, the slowest member linked to it). The
    group's effective cost without it is then at least its cost over that
    summed rate. Exact for a pair. A cruder bound, the others at solo pace,
    is returned when it is already `enough` (no more than that).
    """
    known = view.adds.get(job_id)
    if known is not None or len(view.members) == 1:
        return member_adds(view, group, job_id, spec)
    n = len(view.members)
    own = group.own_cost_per_hour(job_id, spec)
    now = view.cost * n / view.rate
    if now - (view.cost - own) <= enough:
        return now - (view.cost - own)  # even with the others at solo pace
    plans, profiles = _others(view, group, job_id)
    if view.colocated:  # a co-located node's turns serve both pools: own plans only
        periods = [m.times.iter_s for m in plans]
    else:
        periods = period_floors(plans, spec.warm_switch_s, spec.rollout_fifo)
    at_most = progress_rate(periods, profiles, plans)
    return now - (view.cost - own) * (n - 1) / at_most


@dataclass
class Rehomer:
    """Move offers for one policy, remembering where each job was found no better off.

    `tried[job][group]` = (that group's members, a bound below which no
    candidate there adds): a group offered again that has lost none of
    those members (it has no more room) is skipped, unless the job now
    needs less than that bound to move.
    """

    margin: float  # a move must save this x the job's solo $/h
    tried: dict[str, dict[int, tuple[frozenset[str], float]]] = field(default_factory=dict)
    forget_at: int = 64  # remembered jobs beyond which departed ones are dropped

    def offer(
        self, policy: RollMuxPolicy, groups: Mapping[int, Group], group: Group, job_id: str
    ) -> MoveOffer:
        """Offer member `job_id` of `group` to `groups` (all of them: unchanged ones are skipped)."""
        spec = policy.spec
        if len(self.tried) > self.forget_at:
            live = {j for g in groups.values() for j in g.members}
            self.forget(live)
            self.forget_at = 2 * len(live) + 64
        job = group.members[job_id]
        view = policy._group_view(group)
        solo = job.solo_cost_per_hour(spec)
        if member_adds_at_most(view, group, job_id, spec, self.margin * solo) <= self.margin * solo:
            return MoveOffer(None, content=True)  # settled without a round-robin run
        # A move must add less than this.
        need = member_adds(view, group, job_id, spec) - self.margin * solo
        if need <= 0:
            return MoveOffer(None, content=True)
        seen = self.tried.setdefault(job_id, {})
        todo: dict[int, Group] = {}
        for gid, g in groups.items():
            if gid == group.group_id:
                continue
            hit = seen.get(gid)
            if hit is not None and hit[1] >= need and g.pinning.keys() >= hit[0]:
                continue  # no better than `need` then, and it has only gained members since
            todo[gid] = g
        if not todo and solo >= need:
            return MoveOffer(None)
        placement, score = policy.best(todo, job, bound=need)
        if score < need:
            self.placed(job_id, groups, score)
            return MoveOffer(placement)
        for gid, g in todo.items():
            seen[gid] = (frozenset(g.pinning), need)
        return MoveOffer(None)

    def placed(self, job_id: str, groups: Mapping[int, Group], score: float) -> None:
        """A job was placed where it adds `score`: no group searched offered less.

        So its first look after it (an arrival, or a move) skips every group
        whose members have not changed since.
        """
        self.tried[job_id] = {gid: (frozenset(g.pinning), score) for gid, g in groups.items()}

    def forget(self, live: set[str]) -> None:
        """Drop what was remembered of jobs no longer running."""
        for job_id in [j for j in self.tried if j not in live]:
            del self.tried[job_id]
