"""Trimming a member's rollout nodes once its group no longer needs them all.

A job brings its rollout nodes into a group, sized for running alone. Once
partners join and the group's training nodes are busy, the job's rollout
waits behind the others' training anyway: on fewer of its rollout nodes
(a longer rollout) the group keeps the same pace and pays for fewer
nodes. Between two of the job's iterations (its nodes hold none of its
phases) it may drop rollout nodes that no other member uses, when every
member still keeps its SLO and the group's effective cost (its $/h over
its members' summed progress, `group_view.effective_cost`) falls by more
than `margin`. Its state stays resident on the nodes it keeps, so no
switch turns cold.

Unlike opening a job's own group on fewer rollout nodes, which bets that
partners will come (`RollMuxPolicy.shrink_alone`), a trim is judged on
the group as it is. Beyond the paper, which sizes a job's nodes once.
"""

from __future__ import annotations

from roll_agentic.mux.group import Group
from roll_agentic.mux.group_view import GroupView
from roll_agentic.mux.profile import ClusterSpec, PhaseTimes, Pool
from roll_agentic.mux.round_robin import (
    MemberPlan,
    evaluate_on,
    lone_slo_ok,
    progress_rate,
    slo_periods_ok,
)


def own_rollout_nodes(group: Group, job_id: str) -> list[int]:
    """The rollout nodes member `job_id` could drop: those only it uses, if it has others to keep."""
    pin = group.pinning[job_id]
    if pin.colocated or len(pin.rollout_nodes) < 2:
        return []
    return [n for n in pin.rollout_nodes if group.nodes[n].jobs == [job_id]]


def trim_offer(
    view: GroupView,
    group: Group,
    job_id: str,
    options: list[tuple[int, PhaseTimes]],
    spec: ClusterSpec,
    headroom: float,
    margin: float,
) -> tuple[int, ...]:
    """The rollout nodes member `job_id` should drop (none: keep them all).

    Only nodes it uses alone (`own_rollout_nodes`: dropping a shared one
    releases nothing), and only down to the node counts in `options`
    (`candidates.rollout_options`: those whose iteration alone keeps its
    SLO, with their planned times). Of the feasible counts, the one of
    least effective cost.
    """
    pin = group.pinning[job_id]
    own = own_rollout_nodes(group, job_id)
    times_of = dict(options)
    at = view.members.index(job_id)
    profiles = list(group.members.values())
    n_members = len(profiles)
    best: tuple[int, ...] = ()
    best_cost = view.cost * n_members / view.rate * (1.0 - margin)
    for k in range(1, min(len(own), len(pin.rollout_nodes) - 1) + 1):
        times = times_of.get(len(pin.rollout_nodes) - k)
        if times is None:
            break  # fewer nodes only lengthen its iteration further
        drop = tuple(own[-k:])
        keep = tuple(x for x in pin.rollout_nodes if x not in drop)
        plans = list(view.plans)
        plans[at] = MemberPlan(times, keep, pin.train_nodes)
        if n_members > 1:
            periods = evaluate_on(plans, spec)
            if not slo_periods_ok(periods, profiles, headroom):
                break  # fewer nodes only slow the group further
        else:
            periods = []
            if not lone_slo_ok(plans[0], profiles[0], headroom):
                break
        cost = (view.cost - k * spec.price(Pool.ROLLOUT)) * n_members
        rate = progress_rate(periods, profiles, plans)
        if cost / rate < best_cost:
            best, best_cost = drop, cost / rate
    return best
