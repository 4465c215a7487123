"""Placing jobs that arrive together (a sweep submitted at once) as one batch.

Placement on arrival takes jobs one at a time, and the order decides the
groups: the first job of a batch opens a group that a later one would have
shared better with a third (measured on the 20 static instances of
`sim optimality`: arrival order came within 1.45x of the optimum's plan).
Jobs that arrive at one instant are all known, so the scheduler searches
the order in which it places them, which also sets each group's
round-robin order, and runs each order under both candidate sets (the
paper's three kinds, and `share_any`). It keeps the plan with the least
cost per unit of progress over the whole cluster: $/h of every group over
the summed progress rates of its members (the brute-force optimum's own
objective, `sim/optimal.py`).

Search: five seed orders (arrival; dearest, tightest SLO, longest and most
training work first), then first-improvement local search over moving one
job to another position, then random restarts, until the plans tried
hold `budget` placements (the unit of cost: 400 plans of an 8-job batch;
a 100-job sweep gets the five seed orders and ~20 more plans, ~1 s).
Every plan is built by the online policy itself, so every placement in
it passed the policy's memory and SLO checks. A plan is evaluated on a
scratch copy of the groups (`GroupBook.scratch`); its steps carry the ids
the copy gave new groups and nodes, and `ScratchIds` maps them onto the
real book's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from roll_agentic.mux.group import Group, GroupBook, Node, Placement
from roll_agentic.mux.profile import ClusterSpec, JobProfile
from roll_agentic.mux.round_robin import evaluate_on, members_of
from roll_agentic.mux.slo_check import lone_slo_ok, progress_rate, slo_periods_ok


def signature(group: Group) -> tuple:
    """The group up to renaming its nodes: the multiset of per-node job sets.

    Which jobs share which node is all that the pinning says, so two groups
    with equal signatures schedule identically.
    """
    return tuple(sorted((n.pool.value, tuple(sorted(n.jobs))) for n in group.nodes.values()))


class GroupAssessor:
    """SLO feasibility and progress rate per group, memoised by (member order, signature)."""

    def __init__(self, spec: ClusterSpec, headroom: float) -> None:
        self.spec, self.headroom = spec, headroom
        self._memo: dict[tuple, tuple[bool, float]] = {}

    def assess(self, group: Group) -> tuple[bool, float]:
        key = (tuple(group.pinning), signature(group))
        hit = self._memo.get(key)
        if hit is None:
            plans = members_of(group, self.spec)
            profiles = list(group.members.values())
            if len(plans) == 1:
                periods = []
                ok = lone_slo_ok(plans[0], profiles[0], self.headroom)
            else:
                periods = evaluate_on(plans, self.spec)
                ok = slo_periods_ok(periods, profiles, self.headroom)
            hit = self._memo[key] = (ok, progress_rate(periods, profiles, plans))
        return hit

    def objective(self, groups: Iterable[Group]) -> float:
        """$/h of all groups per unit of summed progress (lower is better)."""
        cost = rate = 0.0
        for g in groups:
            cost += g.cost_per_hour(self.spec)
            rate += self.assess(g)[1]
        return cost / rate if rate else 0.0


@dataclass(frozen=True)
class BatchStep:
    """One placement of a batch plan, with the scratch ids it created."""

    job: JobProfile
    placement: Placement
    group_id: int  # the group it landed in, scratch id
    opened: tuple[int, ...]  # nodes it opened, scratch ids, in the book's opening order


# Orders every search tries first, whatever its budget (`search_batch`): arrival
# order, then dearest, tightest SLO, longest and most training work first.
_SEED_KEYS: tuple[Callable[[JobProfile, ClusterSpec], float], ...] = (
    lambda j, spec: -j.solo_cost_per_hour(spec),
    lambda j, spec: j.slo,
    lambda j, spec: -j.planned_iter_s,
    lambda j, spec: -j.train_s * j.n_train,
)
SEED_ORDERS = 1 + len(_SEED_KEYS)

# A policy that places one job (RollMux with or without share_any).
PlaceFn = Callable[[Mapping[int, Group], JobProfile], Placement]


def build_plan(book: GroupBook, order: Sequence[JobProfile], place: PlaceFn) -> list[BatchStep]:
    """Place `order` one by one into `book` (left holding them)."""
    steps = []
    for job in order:
        p = place(book.groups, job)
        group, opened = book.apply(p, job)
        steps.append(BatchStep(job, p, group.group_id, tuple(n.node_id for n in opened)))
    return steps


def search_batch(
    groups: Mapping[int, Group],
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    make_place: Callable[[Hashable], PlaceFn],
    headroom: float,
    budget: int,
    variants: Sequence[Hashable] = (False, True),
) -> list[BatchStep]:
    """The best plan found for `jobs` (see the module docstring); `budget`: placements.

    `make_place(variant)`: the policy that builds a plan, for each of `variants`
    (default: without and with `share_any`); every order is tried under each.
    """
    book = GroupBook.scratch(groups, spec)
    assessor = GroupAssessor(spec, headroom)
    tried: dict[tuple[tuple[str, ...], Hashable], tuple[float, list[BatchStep]]] = {}

    def trial(order: Sequence[JobProfile], variant: Hashable) -> float:
        key = (tuple(j.job_id for j in order), variant)
        if key not in tried:
            steps = build_plan(book, order, make_place(variant))
            tried[key] = (assessor.objective(book.groups.values()), steps)
            for job in order:
                book.remove(job.job_id)
        return tried[key][0]

    calls = 0  # best_of calls, memo hits included: bounds the loop on small batches

    def best_of(order: Sequence[JobProfile]) -> tuple[float, Hashable]:
        nonlocal calls
        calls += 1
        vals = [trial(order, v) for v in variants]
        i = min(range(len(variants)), key=vals.__getitem__)  # ties: the first variant
        return vals[i], variants[i]

    seeds = [list(jobs)] + [sorted(jobs, key=lambda j, k=k: k(j, spec)) for k in _SEED_KEYS]
    best_val, best_order = min(((best_of(o)[0], o) for o in seeds), key=lambda vo: vo[0])
    rng = np.random.default_rng(len(jobs))
    start_val, start = best_val, best_order
    n = len(jobs)
    plans = budget // n  # the seed orders are tried whatever the budget

    def spent() -> bool:
        return len(tried) >= plans or calls >= plans

    while n > 1 and not spent():
        improved = False
        for i in range(n):
            for pos in range(n):
                if pos == i or spent():
                    continue
                order = list(start)
                order.insert(pos, order.pop(i))
                val = best_of(order)[0]
                if val < start_val - 1e-9:
                    start_val, start, improved = val, order, True
        if not improved and not spent():  # a local optimum: restart from a random order
            start = [jobs[k] for k in rng.permutation(n)]
            start_val = best_of(start)[0]
        if start_val < best_val - 1e-9:
            best_val, best_order = start_val, start
    variant = best_of(best_order)[1]
    return tried[(tuple(j.job_id for j in best_order), variant)][1]


class ScratchIds:
    """Maps a plan's scratch ids of new groups and nodes onto a real book's, step by step."""

    def __init__(self) -> None:
        self.group: dict[int, int] = {}
        self.node: dict[int, int] = {}

    def apply(self, book: GroupBook, step: BatchStep) -> tuple[Group, list[Node]]:
        p = step.placement
        real = replace(
            p,
            group_id=self.group.get(p.group_id, p.group_id) if p.group_id is not None else None,
            rollout_nodes=tuple(self.node.get(n, n) for n in p.rollout_nodes),
            train_nodes=tuple(self.node.get(n, n) for n in p.train_nodes),
        )
        group, opened = book.apply(real, step.job)
        self.group[step.group_id] = group.group_id
        self.node.update(zip(step.opened, (n.node_id for n in opened), strict=True))
        return group, opened


def apply_batch(book: GroupBook, steps: Sequence[BatchStep]) -> list[tuple[Group, list[Node]]]:
    """Apply a plan built on a scratch copy: its new groups and nodes get `book`'s ids."""
    ids = ScratchIds()
    return [ids.apply(book, s) for s in steps]
