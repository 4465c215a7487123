"""Trimming a member's rollout nodes once its group no longer needs them all.

A job brings its rollout nodes into a group, sized for running alone. Once
partners join and the group's training nodes are busy, the job's rollout
waits behind the others' training anyway: on fewer rollout nodes (a
longer rollout) the group keeps the same pace and pays for fewer nodes.
Between two of the job's iterations (its nodes hold none of its phases)
it may drop rollout nodes that no other member uses, or, if it shares
none, move its rollouts onto partners' rollout nodes (partners on one of
its training nodes, whose turns are aligned with its own) and release
its own. Either must keep every member's SLO and lower the group's
effective cost (its $/h over its members' summed progress,
`group_view.effective_cost`) by more than `margin`. Rollout weights are
small next to a node's host memory, so on a node with room they stay
resident and the switch stays warm.

Unlike opening a job's own group on fewer rollout nodes, which bets that
partners will come (`RollMuxPolicy.shrink_alone`), a trim is judged on
the group as it is. Beyond the paper, which sizes a job's nodes once.
"""

from __future__ import annotations

from roll_agentic.mux.group import Group
from roll_agentic.mux.group_view import GroupView
from roll_agentic.mux.profile import ClusterSpec, PhaseTimes, Pool
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on
from roll_agentic.mux.slo_bound import surely_misses_slo
from roll_agentic.mux.slo_check import lone_slo_ok, progress_rate, slo_periods_ok


def own_rollout_nodes(group: Group, job_id: str) -> list[int]:
    """The rollout nodes only member `job_id` uses (releasing them saves their price)."""
    pin = group.pinning[job_id]
    if pin.colocated:
        return []
    return [n for n in pin.rollout_nodes if group.nodes[n].jobs == [job_id]]


def _partner_nodes(group: Group, job_id: str, order: list[int]) -> list[int]:
    """Rollout nodes of its group (in `order`) it does not use, whose users all share a
    training node with it and with room for its weights."""
    job, pin = group.members[job_id], group.pinning[job_id]
    train = set(pin.train_nodes)
    out = []
    for nid in order:
        node = group.nodes[nid]
        if job_id in node.jobs or node.mem_free_gb < job.rollout_mem_gb:
            continue
        if all(train & set(group.pinning[j].train_nodes) for j in node.jobs):
            out.append(nid)
    return out


def _changes(group: Group, job_id: str, own: list[int], order: list[int]) -> list[tuple[int, ...]]:
    """The rollout node sets member `job_id` could move to: fewer of its own nodes, or,
    if it shares none, partners' nodes (`_partner_nodes`, taken in `order`)."""
    now = group.pinning[job_id].rollout_nodes
    changes = [tuple(x for x in now if x not in own[-k:]) for k in range(1, len(own) + 1)]
    changes = [keep for keep in changes if keep]
    if len(own) == len(now):
        partners = _partner_nodes(group, job_id, order)
        changes += [tuple(partners[:n]) for n in range(1, len(partners) + 1)]
    return changes


def could_trim(group: Group, job_id: str, own: list[int], counts: set[int]) -> bool:
    """Whether `trim_offer` has a change to weigh at all, judged without the group's view.

    Most looks find none: the job's SLO allows no fewer rollout nodes than
    it runs on and no partner's node would take its rollouts. `counts`:
    the rollout node counts its SLO allows (`candidates.rollout_options`).
    """
    return any(len(keep) in counts for keep in _changes(group, job_id, own, list(group.nodes)))


def trim_offer(
    view: GroupView,
    group: Group,
    job_id: str,
    own: list[int],
    options: list[tuple[int, PhaseTimes]],
    spec: ClusterSpec,
    headroom: float,
    margin: float,
) -> tuple[int, ...]:
    """The rollout nodes member `job_id` should run on from now (empty: keep its own).

    Two kinds of change, each releasing only nodes it uses alone (`own`,
    from `own_rollout_nodes`): keep fewer of its nodes; or, if it shares none,
    move onto partners' nodes (`_partner_nodes`). Only node counts in
    `options` (`candidates.rollout_options`: those whose iteration alone
    keeps its SLO, with their planned times). Of the feasible changes, the
    one of least effective cost.
    """
    pin = group.pinning[job_id]
    if not own:
        return ()
    changes = _changes(group, job_id, own, view.rollout_order)
    times_of = dict(options)
    at = view.members.index(job_id)
    profiles = list(group.members.values())
    n_members = len(profiles)
    best: tuple[int, ...] = ()
    # The group's own effective cost needs its rate (a round-robin run, if
    # not known yet): taken only once a change keeps every SLO.
    best_cost: float | None = None
    for keep in changes:
        times = times_of.get(len(keep))
        if times is None:
            continue  # its iteration alone would break its SLO
        plans = list(view.plans)
        plans[at] = MemberPlan(times, keep, pin.train_nodes)
        if n_members > 1:
            fifo = spec.rollout_fifo  # where the run is slow (see `RollMuxPolicy.best`)
            if fifo and surely_misses_slo(plans, profiles, headroom, spec.warm_switch_s, fifo):
                continue
            periods = evaluate_on(plans, spec)
            if not slo_periods_ok(periods, profiles, headroom):
                continue
        else:
            periods = []
            if not lone_slo_ok(plans[0], profiles[0], headroom):
                continue
        released = sum(1 for n in own if n not in keep)
        cost = (view.cost - released * spec.price(Pool.ROLLOUT)) * n_members
        rate = progress_rate(periods, profiles, plans)
        if best_cost is None:
            best_cost = view.cost * n_members / view.rate * (1.0 - margin)
        if cost / rate < best_cost:
            best, best_cost = keep, cost / rate
    return best
