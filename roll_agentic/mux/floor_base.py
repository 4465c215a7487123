"""`slo_bound.feasible_floors` for a group's candidates, the group's part computed once.

`RollMuxPolicy.best` weighs several candidates per group, each the group's
members plus the newcomer last, with FIFO rollout nodes (where the bound
pays). Every sum `slo_bound.period_floors` takes runs in member order, so
with the newcomer last each is the members' partial sum, kept here per
group view, plus the newcomer's term: the same floats in the same order.
What needs the newcomer (its own bound, its waits, shared training loads,
linked paces) is computed per candidate as there. A candidate whose
training nodes are some member's rollout nodes, or the other way round
(never in groups `best` weighs: node ids are per pool), goes the full way.
Tests check the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roll_agentic.mux.pace_lock import slowest_linked
from roll_agentic.mux.profile import JobProfile
from roll_agentic.mux.round_robin import MemberPlan
from roll_agentic.mux.slo_bound import feasible_floors, training_loads
from roll_agentic.mux.slo_check import group_headroom

if TYPE_CHECKING:
    from roll_agentic.mux.group_view import GroupView


@dataclass
class FloorBase:
    """A group's members' share of its candidates' floors (see the module docstring)."""

    plans: list[MemberPlan]
    profiles: list[JobProfile]
    headroom: float
    switch_s: float
    keep: float  # 1 + the headroom a group of one member more keeps back
    budgets: list[float]  # the members' SLO budgets in such a group
    train_load: dict[int, float]  # per training node: the members' phases and switches
    on_train: dict[int, int]  # per training node: members on it
    fifo: list[set[int]]  # each member's rollout nodes (none is a training node)
    rollout: set[int]  # all of them
    waits: list[float]  # each member's wait behind the others' rollouts
    holds: list[float]  # each member's rollout hold
    iters: list[float]  # each member's own iteration

    @classmethod
    def of(
        cls, plans: Sequence[MemberPlan], profiles: Sequence[JobProfile], headroom: float, switch_s: float
    ) -> FloorBase:
        n = len(plans)
        keep = 1.0 + group_headroom(headroom, n + 1)
        budgets = [p.slo * p.planned_iter_s / keep for p in profiles]
        times = [m.times for m in plans]
        train_load, on_train = training_loads(plans, times, switch_s)
        fifo = [set(m.rollout_nodes).difference(train_load) for m in plans]
        holds = [t.roll_node_s for t in times]
        waits = []
        for k in range(n):
            wait = 0.0
            mine = fifo[k]
            if mine:
                for j in range(n):
                    if j != k and not mine.isdisjoint(fifo[j]):
                        wait += holds[j] * holds[j] / (2.0 * budgets[j])
            waits.append(wait)
        return cls(
            list(plans), list(profiles), headroom, switch_s, keep, budgets, train_load, on_train,
            fifo, set().union(*fifo), waits, holds, [t.iter_s for t in times],
        )

    def matches(self, plans: Sequence[MemberPlan], profiles: Sequence[JobProfile]) -> bool:
        """Built from these members (the same objects) and settings?"""
        return (
            len(plans) == len(self.plans)
            and all(a is b for a, b in zip(plans, self.plans, strict=True))
            and all(a is b for a, b in zip(profiles, self.profiles, strict=True))
        )

    def feasible_floors(self, plan: MemberPlan, job: JobProfile) -> list[float] | None:
        """`slo_bound.feasible_floors` of the members plus `job` on `plan`, FIFO rollout nodes."""
        new_train, new_roll = plan.train_nodes, plan.rollout_nodes
        train_load = self.train_load
        if (
            not self.rollout.isdisjoint(new_train)
            or not train_load.keys().isdisjoint(new_roll)
            or not set(new_roll).isdisjoint(new_train)
        ):
            plans = [*self.plans, plan]
            profiles = [*self.profiles, job]
            return feasible_floors(plans, profiles, self.headroom, self.switch_s, True)
        n = len(self.plans)
        t = plan.times
        budget_new = job.slo * job.planned_iter_s / self.keep
        budgets = self.budgets
        # Training loads with the newcomer, added last as `period_floors` does.
        load = dict(train_load)
        on = dict(self.on_train)
        for x in new_train:
            load[x] = load.get(x, 0.0) + t.train_s + self.switch_s
            on[x] = on.get(x, 0) + 1
        # Waits: the members' sums, then the newcomer's term last; its own in member order.
        mine = set(new_roll)
        hold = t.roll_node_s
        term_new = hold * hold / (2.0 * budget_new)
        fifo, holds, iters, waits = self.fifo, self.holds, self.iters, self.waits
        bound = []
        wait_new = 0.0
        for k in range(n):
            if not fifo[k]:
                bound.append(iters[k])
                continue
            if mine and not fifo[k].isdisjoint(mine):
                bound.append(iters[k] + (waits[k] + term_new))
                wait_new += holds[k] * holds[k] / (2.0 * budgets[k])
            else:
                bound.append(iters[k] + waits[k])
        bound.append(t.iter_s + wait_new if mine else t.iter_s)
        plans = self.plans
        shared = len(on) < sum(on.values())
        if shared:
            for k in range(n + 1):
                for x in (plans[k].train_nodes if k < n else new_train):
                    if on[x] > 1 and load[x] > bound[k]:
                        bound[k] = load[x]
            floors = slowest_linked(bound, [*(m.train_nodes for m in plans), new_train])
        else:
            floors = [f if f > 0.0 else 0.0 for f in bound]
        for k in range(n):
            if floors[k] > budgets[k]:
                return None
        if floors[n] > budget_new:
            return None
        return floors


def view_floor_base(view: GroupView, profiles: list[JobProfile], headroom: float, switch_s: float) -> FloorBase:
    """The view's members' share of its candidates' SLO bounds, kept on the view while its
    plans, members, headroom and switch cost stand; `profiles`: theirs, the newcomer last."""
    members = profiles[:-1]
    kept = view.floor_base
    if kept:
        base = kept[0]
        if base.headroom == headroom and base.switch_s == switch_s and base.matches(view.plans, members):
            return base
    base = FloorBase.of(view.plans, members, headroom, switch_s)
    view.floor_base[:] = [base]
    return base
