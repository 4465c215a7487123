"""Brute-force optimal placement for small instances (a yardstick for RollMux).

Instance: up to ~8 jobs that all run at once (placed in a fixed order).
Search: depth-first over every placement of every job: each existing group
with every choice of its existing nodes (any subset of the right size, plus
any number of new nodes in either pool), or a new group; with its own
rollout node count or, with `rollout_shrink`, fewer (a longer rollout);
subject only to the
real constraints: host memory and every member's SLO under round robin on
typical phase lengths (the same check and headroom RollMux uses).
Objective: cost per unit of work, i.e. $/h of all nodes divided by the
summed progress rates sum_k T_k(solo) / T_k(co-run), so that slowing a job
down is not free. Branch and bound: $/h only grows as jobs are added and no
rate exceeds 1, so cost_so_far / n_jobs bounds any completion from below.
Nodes of a group holding the same jobs are interchangeable, so a choice of
existing nodes is a count per such class (an exact symmetry cut). The
budget counts placements tried: each is one memoised round-robin run, the
unit of time here. Feasibility is RollMux's own (`memory_ok`, the SLO check
with its headroom); the space is wider than RollMux's on purpose: this is
the optimum of the placement problem, not of RollMux's candidate set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from roll_agentic.mux.batch import GroupAssessor, signature
from roll_agentic.mux.candidates import memory_ok, new_group_placement, rollout_options
from roll_agentic.mux.group import CandidateKind, Group, GroupBook, Placement, other_form
from roll_agentic.mux.placement import SLO_HEADROOM
from roll_agentic.mux.policy import RoundRobinPhases
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool


@dataclass(frozen=True)
class Step:
    """A placement by position, so it can be replayed on a fresh book."""

    group: int | None  # ordinal of the group in opening order; None = new group
    rollout: tuple[int, ...]  # ordinals of existing nodes within the group
    train: tuple[int, ...]
    new_rollout: int
    new_train: int


def _choices(classes: list[list[int]], k: int) -> list[tuple[int, ...]]:
    """Every way to pick `k` nodes, up to swapping nodes of one class.

    Nodes of a pool that hold the same jobs are interchangeable (same
    memory left, same FIFO partners), so a choice is how many to take from
    each class: the first ones of it, by ordinal.
    """
    if not classes:
        return [()] if k == 0 else []
    head, rest = classes[0], classes[1:]
    out = []
    for m in range(min(k, len(head)), -1, -1):
        out += [tuple(head[:m]) + tail for tail in _choices(rest, k - m)]
    return out


def _classes(group: Group, pool: Pool) -> list[list[int]]:
    by_jobs: dict[tuple[str, ...], list[int]] = {}
    for i, node in enumerate(group.nodes.values()):
        if node.pool is pool:
            by_jobs.setdefault(tuple(sorted(node.jobs)), []).append(i)
    return list(by_jobs.values())


def job_steps(book: GroupBook, job: JobProfile, counts: list[int]) -> list[Step]:
    """Every placement of `job`, giving it each of `counts` rollout nodes (`rollout_options`)."""
    out = [Step(None, (), (), n, job.n_train) for n in counts]
    for gi, group in enumerate(book.groups.values()):
        if any(p.colocated for p in group.pinning.values()) or other_form(group, job.form):
            continue
        r_cls, t_cls = _classes(group, Pool.ROLLOUT), _classes(group, Pool.TRAIN)
        n_r, n_t = sum(map(len, r_cls)), sum(map(len, t_cls))
        for n in counts:
            for k_t in range(min(job.n_train, n_t), -1, -1):
                for k_r in range(min(n, n_r), -1, -1):
                    if k_t == 0 and k_r == 0:
                        continue  # nothing shared: that is a new group
                    for ts in _choices(t_cls, k_t):
                        for rs in _choices(r_cls, k_r):
                            out.append(Step(gi, rs, ts, n - k_r, job.n_train - k_t))
    return out


def to_placement(book: GroupBook, step: Step, job: JobProfile, spec: ClusterSpec) -> Placement:
    if step.group is None:
        return new_group_placement(job, spec, step.new_rollout)
    group = list(book.groups.values())[step.group]
    ids = list(group.nodes)
    extra = step.new_rollout * spec.price(Pool.ROLLOUT) + step.new_train * spec.price(Pool.TRAIN)
    kind = CandidateKind.PACK if extra == 0 else CandidateKind.ADD_ROLLOUT
    return Placement(
        CandidateKind.SHARE if step.new_train else kind,
        group.group_id,
        rollout_nodes=tuple(ids[i] for i in step.rollout),
        train_nodes=tuple(ids[i] for i in step.train),
        new_rollout=step.new_rollout,
        new_train=step.new_train,
        extra_cost_per_hour=extra,
    )


@dataclass
class OptimalResult:
    objective: float  # $/h per unit of progress
    steps: list[Step]
    visited: int
    complete: bool  # False if the node budget ran out before the search did


def solve(
    jobs: Sequence[JobProfile],
    spec: ClusterSpec,
    headroom: float = SLO_HEADROOM,
    upper_bound: float = float("inf"),
    node_budget: int = 200_000,
) -> OptimalResult:
    """The cheapest SLO-feasible placement of `jobs` by exhaustive search."""
    book = GroupBook(spec)
    n = len(jobs)
    best = OptimalResult(upper_bound, [], 0, True)
    path: list[Step] = []
    cache = GroupAssessor(spec, headroom)
    seen: set[tuple] = set()
    # Rollout node counts each job may run on: its own, or fewer while alone it keeps its SLO.
    counts = [[n for n, _ in rollout_options(job, spec, headroom)] for job in jobs]

    def dfs(i: int, cost: float) -> None:
        if not best.complete:
            return
        if cost / n >= best.objective:
            return
        state = tuple(sorted(signature(g) for g in book.groups.values()))
        if state in seen:  # reached before by placing the same jobs differently
            return
        seen.add(state)
        if i == n:
            rate = sum(cache.assess(g)[1] for g in book.groups.values())
            obj = cost / rate
            if obj < best.objective:
                best.objective, best.steps = obj, list(path)
            return
        job = jobs[i]
        steps = [(step, to_placement(book, step, job, spec)) for step in job_steps(book, job, counts[i])]
        steps.sort(key=lambda sp: sp[1].extra_cost_per_hour)  # cheap first: tight bounds early
        for step, p in steps:
            if p.group_id is not None and not memory_ok(book.groups[p.group_id], job, p):
                continue
            # The budget counts placements tried, each one a (memoised)
            # round-robin run: that, not the depth, is what costs time.
            best.visited += 1
            if best.visited > node_budget:
                best.complete = False
                return
            group, _ = book.apply(p, job)
            if cache.assess(group)[0]:
                path.append(step)
                dfs(i + 1, cost + p.extra_cost_per_hour)
                path.pop()
            book.remove(job.job_id)

    dfs(0, 0.0)
    return best


def plan_objective(
    book: GroupBook, spec: ClusterSpec, headroom: float = SLO_HEADROOM
) -> float:
    """The search's objective for an existing placement ($/h per unit of progress)."""
    return GroupAssessor(spec, headroom).objective(book.groups.values())


@dataclass
class ReplayPolicy(RoundRobinPhases):
    """Places jobs exactly as a solved plan says (jobs must arrive in plan order)."""

    spec: ClusterSpec
    steps: list[Step]
    name: str = "optimal"
    _i: int = field(default=0, repr=False)

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        # Positions are resolved against the caller's groups, which were
        # opened in the same order as in the search.
        shadow = GroupBook(self.spec)
        shadow.groups = dict(groups)
        p = to_placement(shadow, self.steps[self._i], job, self.spec)
        self._i += 1
        return p
