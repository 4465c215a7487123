"""A group's candidates for an arriving job, each with a bound on its score, unsimulated.

`RollMuxPolicy.best` sorts every group's candidates by these bounds and runs
the SLO check (a round-robin simulation) in that order, stopping once no
candidate left can beat the best feasible one. A bound needs no
simulation: the newcomer can run no faster than its busiest node allows,
and the members no faster than now. The paper's saturation estimate
screens candidates out before that.
"""

from __future__ import annotations

from typing import NamedTuple

from roll_agentic.mux.group import Group
from roll_agentic.mux.group_view import GroupView
from roll_agentic.mux.profile import JobProfile, PhaseTimes

# A candidate: (bound, extra $/h, unlikely, -tightness, index), its group,
# rollout and training nodes it opens, existing nodes it pins (rollout
# first), the job's planned phase times there, its training node count.
Ranked = tuple[
    tuple[float, float, bool, float, int], Group, int, int, tuple[int, ...], PhaseTimes, int
]
# A job's planned phase times per rollout node count it may run on
# (`candidates.rollout_options`), one list per training nodes beyond its own.
Options = list[list[tuple[int, PhaseTimes]]]


class RankRules(NamedTuple):
    """The policy's settings the ranking reads (`RollMuxPolicy`'s fields of the same names)."""

    switch_s: float  # warm switch per phase
    price_rollout: float  # $/h of a rollout node
    price_train: float  # $/h of a training node
    share_any: bool
    share_train: bool
    screen: bool
    rate_aware: bool


def rank_candidates(
    ranked: list[Ranked],
    rules: RankRules,
    view: GroupView,
    group: Group,
    job: JobProfile,
    options: list[tuple[int, PhaseTimes]],
    extra_train: int,
    train: list[int],
    rollout: list[int],
    budget: float,
    fallback_score: float,
    cutoff: float = float("inf"),
) -> None:
    """Append the group's candidates, with their bounds, for each rollout node
    count in `options`, the job trained on `extra_train` nodes beyond its own.
    Those whose bound is `cutoff` or more (the caller takes none that adds
    as much) are left out.

    Every candidate reuses the group's least-loaded training nodes and
    least-loaded rollout nodes, so its loads follow from the cached
    view without copying it: only the nodes it touches change, and
    they only grow.
    """
    switch = rules.switch_s
    price_r, price_t = rules.price_rollout, rules.price_train
    screen, rate_aware, share_train = rules.screen, rules.rate_aware, rules.share_train
    n_train = job.n_train + extra_train
    # Training nodes a candidate may open: in the paper's kinds only those
    # beyond the job's own count (`scale_train`), with `share_any` any.
    t_new_lo, t_new_hi = (0, n_train) if rules.share_any else (extra_train, extra_train)
    # The view's fields, read once: this runs for every group of every
    # search (45,000 times on 2,000 jobs with every option).
    load, max_load, view_cycle, sum_load = view.load, view.max_load, view.cycle, view.sum_load
    n_nodes, n_members, cost = len(load), len(view.members), view.cost
    planned_iter = job.planned_iter_s
    # The group's rate and effective cost, read when a bound needs them: a
    # rate not known yet is a round-robin run, which a group whose every
    # candidate the screens reject never needs.
    rate, before = 0.0, None
    if rate_aware and view.rate_if_known() is not None:
        rate = view.rate
        before = cost * n_members / rate
    for n_roll, t in options:
        own_iter = t.iter_s
        if screen and own_iter > budget:
            break  # its own iteration alone passes the budget, and on fewer nodes it is longer
        roll_add, train_add = t.roll_node_s + switch, t.train_s + switch
        cycle = max(view_cycle, own_iter)
        # Fewer rollout nodes to reuse than the group has: none of those candidates.
        r_new_lo = max(0, n_roll - len(rollout))
        for t_new in range(t_new_lo, t_new_hi + 1):
            t_reuse = n_train - t_new
            if t_reuse > len(train) or (t_reuse == 0 and share_train):
                continue
            train_top = load[train[t_reuse - 1]] + train_add if t_reuse else train_add
            base = sum_load + n_train * train_add + n_roll * roll_add
            top_train = max(max_load, train_top, roll_add)
            if screen and max(cycle, top_train) > budget:
                continue  # the screen below would reject each of them: their tops are no lower
            if before is not None:
                # Each bound below is at least this one: no fewer new nodes,
                # and the newcomer at most at solo speed (rate_max <= 1).
                extra = r_new_lo * price_r + t_new * price_t
                if (cost + extra) * (n_members + 1) / (rate + 1.0) - before >= cutoff:
                    continue
            for r_new in range(r_new_lo, n_roll + 1):
                r_reuse = n_roll - r_new
                if r_reuse + t_reuse == 0:
                    continue  # sharing nothing is a new group
                extra = r_new * price_r + t_new * price_t
                if extra >= fallback_score:
                    break  # no cheaper than a group of its own, nor any with more new nodes
                if r_reuse:
                    roll_top = load[rollout[r_reuse - 1]] + roll_add
                    top = max(top_train, roll_top)
                else:
                    top = top_train
                # The paper's estimate: an unsaturated group runs at its
                # longest solo cycle; past saturation, at its busiest
                # node's load. It screens candidates before the
                # simulated check; one it rejects is rarely feasible.
                peak = max(cycle, top)
                likely = peak <= budget
                if not likely and screen:
                    continue
                tight = base / (n_nodes + r_new + t_new) / peak
                lb = extra
                if rate_aware:
                    # Its busiest node serves all its phases once per
                    # meta-iteration: the newcomer cannot run faster.
                    # (Opening every training node, train_top is train_add.)
                    own = max(train_top, roll_top) if r_reuse else train_top
                    rate_max = min(1.0, planned_iter / max(own_iter, own - switch))
                    if before is None:
                        rate = view.rate
                        before = cost * n_members / rate
                    # `group_view.effective_cost`, written out: the same sums in the same order.
                    lb = (cost + extra) * (n_members + 1) / (rate + rate_max) - before
                if lb >= cutoff:
                    continue
                key = (lb, extra, not likely, -tight, len(ranked))
                pinned = tuple(rollout[:r_reuse]) + tuple(train[:t_reuse])
                ranked.append((key, group, r_new, t_new, pinned, t, n_train))
