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
from roll_agentic.mux.group_view import GroupView, effective_cost
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
    n_train = job.n_train + extra_train
    # Training nodes a candidate may open: in the paper's kinds only those
    # beyond the job's own count (`scale_train`), with `share_any` any.
    t_new_lo, t_new_hi = (0, n_train) if rules.share_any else (extra_train, extra_train)
    for n_roll, t in options:
        own_iter = t.iter_s
        if rules.screen and own_iter > budget:
            break  # its own iteration alone passes the budget, and on fewer nodes it is longer
        roll_add, train_add = t.roll_node_s + switch, t.train_s + switch
        cycle = max(view.cycle, own_iter)
        for t_new in range(t_new_lo, t_new_hi + 1):
            t_reuse = n_train - t_new
            if t_reuse > len(train) or (t_reuse == 0 and rules.share_train):
                continue
            train_top = view.load[train[t_reuse - 1]] + train_add if t_reuse else train_add
            base = view.sum_load + n_train * train_add + n_roll * roll_add
            for r_new in range(n_roll + 1):
                r_reuse = n_roll - r_new
                if r_reuse > len(rollout) or r_reuse + t_reuse == 0:
                    continue  # sharing nothing is a new group
                extra = r_new * price_r + t_new * price_t
                if extra >= fallback_score:
                    continue  # no cheaper than a group of its own
                top = max(view.max_load, train_top, roll_add)
                if r_reuse:
                    top = max(top, view.load[rollout[r_reuse - 1]] + roll_add)
                # The paper's estimate: an unsaturated group runs at its
                # longest solo cycle; past saturation, at its busiest
                # node's load. It screens candidates before the
                # simulated check; one it rejects is rarely feasible.
                likely = max(cycle, top) <= budget
                if not likely and rules.screen:
                    continue
                tight = base / (len(view.load) + r_new + t_new) / max(cycle, top)
                lb = extra
                if rules.rate_aware:
                    # Its busiest node serves all its phases once per
                    # meta-iteration: the newcomer cannot run faster.
                    own = train_top if t_reuse else train_add
                    if r_reuse:
                        own = max(own, view.load[rollout[r_reuse - 1]] + roll_add)
                    rate_max = min(1.0, job.planned_iter_s / max(own_iter, own - switch))
                    lb = effective_cost(view, extra, rate_max)
                if lb >= cutoff:
                    continue
                key = (lb, extra, not likely, -tight, len(ranked))
                pinned = tuple(rollout[:r_reuse]) + tuple(train[:t_reuse])
                ranked.append((key, group, r_new, t_new, pinned, t, n_train))
