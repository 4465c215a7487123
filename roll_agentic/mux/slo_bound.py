"""A candidate group that surely misses an SLO, told without a round-robin run.

The SLO check runs the group's round robin (`round_robin.evaluate_on`),
about 0.1 ms a time and thousands of times per trace. Some candidates can
be rejected from lower bounds on the periods that run would find:

- a member's period is at least its own iteration;
- a training node serves each of its members one phase per round, in
  turns, so with two or more members there every one of them takes at
  least the node's load per iteration (their phases and warm switches);
- with first-come-first-served rollout nodes the plan adds each member's
  mean wait behind the others' rollouts (`fifo_rollout.with_queueing`),
  which falls as their periods grow; in a feasible group none exceeds its
  SLO budget, so the wait at those budgets is a lower bound;
- members linked by shared turn-taking nodes run at the slowest one's
  pace (`round_robin.locked_periods`).

If one of these bounds already passes a member's budget, the run could
only confirm it. Never wrong the other way (tests check it on random
groups); on the 200-job trace with every option it settled about half of
the candidates the run rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

from roll_agentic.mux.pace_lock import slowest_linked
from roll_agentic.mux.profile import JobProfile
from roll_agentic.mux.round_robin import MemberPlan, locked_periods
from roll_agentic.mux.slo_check import group_headroom


def training_loads(plans: Sequence[MemberPlan], times: Sequence, switch_s: float
                   ) -> tuple[dict[int, float], dict[int, int]]:
    """Per training node: the seconds of training (switches included) its members
    put on it in one turn each, and how many members train there."""
    train_load: dict[int, float] = {}
    on_train: dict[int, int] = {}
    for m, t in zip(plans, times, strict=True):
        for x in m.train_nodes:
            train_load[x] = train_load.get(x, 0.0) + t.train_s + switch_s
            on_train[x] = on_train.get(x, 0) + 1
    return train_load, on_train


def period_floors(
    plans: Sequence[MemberPlan],
    switch_s: float,
    fifo_rollout: bool,
    budgets: Sequence[float] | None = None,
) -> list[float]:
    """Lower bounds on each member's round-robin period, with no run (see the module docstring).

    `budgets`: the members' SLO budgets, if the group is taken to be
    feasible; with FIFO rollout nodes they bound each member's least wait.
    """
    n = len(plans)
    times = [m.times for m in plans]
    train_load, on_train = training_loads(plans, times, switch_s)
    # Each member's own bound: its iteration (plus its least FIFO wait), its
    # shared training nodes' loads.
    bound = [t.iter_s for t in times]
    if fifo_rollout and budgets is not None:
        fifo = [set(m.rollout_nodes).difference(train_load) for m in plans]
        for k in range(n):
            mine = fifo[k]
            if not mine:
                continue
            wait = 0.0
            for j in range(n):
                if j != k and not mine.isdisjoint(fifo[j]):
                    hold = times[j].roll_node_s
                    wait += hold * hold / (2.0 * budgets[j])
            bound[k] += wait
    shared = len(on_train) < sum(on_train.values())  # a training node has two or more members
    if shared:
        for k, m in enumerate(plans):
            for x in m.train_nodes:
                if on_train[x] > 1 and train_load[x] > bound[k]:
                    bound[k] = train_load[x]
    # Linked members share the slowest one's pace: training nodes link them,
    # and rollout nodes too where they take turns.
    if not fifo_rollout:
        return locked_periods(bound, plans)
    if not shared:  # nothing links them (`slowest_linked` finds each alone)
        return [t if t > 0.0 else 0.0 for t in bound]
    return slowest_linked(bound, [m.train_nodes for m in plans])


def feasible_floors(
    plans: Sequence[MemberPlan],
    profiles: Sequence[JobProfile],
    headroom: float,
    switch_s: float,
    fifo_rollout: bool,
) -> list[float] | None:
    """Lower bounds on the periods of the group if it keeps every SLO; None if it surely cannot.

    None only if `slo_periods_ok` on the group's round-robin periods would
    be False. Otherwise the bounds hold for the run's periods whenever that
    check passes: a candidate's progress rate is at most theirs, so its
    score is at least what they give (`RollMuxPolicy.best` skips a
    candidate whose bound already loses to the best one found).
    """
    keep = 1.0 + group_headroom(headroom, len(profiles))
    budgets = [p.slo * p.planned_iter_s / keep for p in profiles]
    floors = period_floors(plans, switch_s, fifo_rollout, budgets)
    if any(t > b for t, b in zip(floors, budgets, strict=True)):
        return None
    return floors


def surely_misses_slo(
    plans: Sequence[MemberPlan],
    profiles: Sequence[JobProfile],
    headroom: float,
    switch_s: float,
    fifo_rollout: bool,
) -> bool:
    """True only if `slo_periods_ok` on the group's round-robin periods would be False."""
    return feasible_floors(plans, profiles, headroom, switch_s, fifo_rollout) is None
