"""Intra-group schedule: round robin over per-node FIFOs of phases.

Every node keeps a FIFO of phases. A job has one phase outstanding at a time;
when it ends, the job's next phase is appended to the FIFOs of the nodes of
the other pool (rollout -> train -> sync -> rollout). A phase that spans
several nodes starts when it heads all their FIFOs and all are free. Because
a phase is appended to all its FIFOs at one instant and instants are totally
ordered, FIFO orders agree across nodes and no gang of nodes can deadlock.

`evaluate_round_robin` runs this schedule deterministically for a few
meta-iterations on worst-case phase times: it is the "simulate one
round-robin meta-iteration" step of the SLO check, kept here, free of any
simulator, so that the policy stays plain code. `evaluate_static_order` runs
any other fixed phase order, for comparison in tests.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from roll_agentic.mux.fifo_rollout import fifo_train_ends, queued_periods, with_queueing
from roll_agentic.mux.group import Group, Pinning
from roll_agentic.mux.pace_lock import slowest_linked
from roll_agentic.mux.profile import (
    ClusterSpec,
    PhaseKind,
    PhaseTimes,
    Pool,
)
from roll_agentic.mux.repeat_watch import RepeatWatch


@dataclass(frozen=True)
class PhaseSpec:
    """One phase to enqueue: which job, which kind, on which nodes (none for sync)."""

    job_id: str
    kind: PhaseKind
    nodes: tuple[int, ...]


def round_robin_next(pin: Pinning, job_id: str, finished: PhaseKind | None) -> list[PhaseSpec]:
    """The phase a job enqueues after `finished` (None: it just joined)."""
    if finished is None or finished is PhaseKind.SYNC:
        return [PhaseSpec(job_id, PhaseKind.ROLLOUT, pin.nodes_for(Pool.ROLLOUT))]
    if finished is PhaseKind.ROLLOUT:
        return [PhaseSpec(job_id, PhaseKind.TRAIN, pin.train_nodes)]
    return [PhaseSpec(job_id, PhaseKind.SYNC, ())]


@dataclass(frozen=True)
class MemberPlan:
    """A group member as the evaluator sees it: phase times and nodes."""

    times: PhaseTimes
    rollout_nodes: tuple[int, ...]
    train_nodes: tuple[int, ...]


def members_of(group: Group, spec: ClusterSpec) -> list[MemberPlan]:
    """The group's members on their typical phase lengths (`profile.planned`)."""
    return [
        MemberPlan(
            group.planned_times(j, spec),
            pin.nodes_for(Pool.ROLLOUT),
            pin.train_nodes,
        )
        for j, pin in group.pinning.items()
    ]


K = TypeVar("K")
_IDLE = 1 << 60  # a FIFO node's key for a member with no rollout queued there


def node_turn(keys: Mapping[K, tuple[int, int]]) -> K:
    """Whose phase a node serves next: the job of the lowest (round, join order).

    `keys` maps each job pinned to the node to the round of its next phase
    there and its join order. A node waits for that job even when another
    one's phase is ready, so every job runs one rollout and one training
    phase per meta-iteration and a short job never laps a long one
    (MECHANISMS.md section 2): plans and runs agree whatever the phase
    lengths. A gang's phase has the same key on each of its nodes, so the
    keys order all queued phases one way, and the least of them can always
    start: no gang deadlocks, whatever rounds the jobs were given.
    """
    return min(keys, key=keys.__getitem__)


def _steady_period(ends: list[float]) -> float:
    """Mean iteration time over the second half of a run (past the cold start)."""
    k0 = len(ends) // 2
    if len(ends) - 1 <= k0:
        return ends[-1]
    return (ends[-1] - ends[k0]) / (len(ends) - 1 - k0)


def locked_periods(
    periods: list[float], members: Sequence[MemberPlan], fifo_rollout: bool = False
) -> list[float]:
    """Each member's long-run period: the slowest of those it shares nodes with, directly or not.

    Taking turns, two jobs on one node start their phases there alternately,
    so neither gets more than one iteration ahead: in the long run every
    member of a set linked by shared nodes runs at the pace of its slowest.
    A run of a few meta-iterations does not show that yet (a faster member
    spends its one iteration of lead over the run and looks faster than it
    can stay), and plans must hold for the whole job. Rollout nodes that
    serve first come, first served (`fifo_rollout`) take no turns and lock
    no paces: only shared training nodes link members then.
    """
    if fifo_rollout:
        return slowest_linked(periods, [m.train_nodes for m in members])
    return slowest_linked(periods, [(*m.rollout_nodes, *m.train_nodes) for m in members])


def evaluate_round_robin(
    members: Sequence[MemberPlan],
    meta_iterations: int | None = None,
    switch_s: float = 0.0,
    fifo_rollout: bool = False,
) -> list[float]:
    """Steady-state iteration time of each member under round robin.

    Every node serves its members in turns (`node_turn`): a phase starts
    when its job holds the turn on all its nodes and they are free. Members
    join at t = 0 in list order. A node pays `switch_s` when it starts a
    phase of another job or kind than its previous one (a warm switch: the
    state is resident in host memory). The cold start settles slowly when
    gangs of nodes overlap, so the run lasts 6 + 3 * members iterations by
    default and the period is read from its second half; it stops sooner
    once a meta-iteration repeats the last one shifted (`repeat_watch.py`),
    which most groups do after two or three.

    With each node in one pool, a node's turn key is (meta-iteration, join
    order), so it serves its members in join order, round after round, and
    every phase starts at the latest end of what it waits for: its job's
    previous phase (plus sync) and the previous phase on each of its nodes.
    That is a recursion in meta-iteration then join order, computed here
    without an event queue (this runs inside every SLO check, thousands of
    times per trace). Rollout nodes that serve queued rollouts first come,
    first served instead of in turns (`fifo_rollout`,
    `ClusterSpec.rollout_fifo`) take a recursion of their own
    (`fifo_rollout.fifo_train_ends`). A node that serves both pools (a
    co-located member) has two turns per meta-iteration:
    `_evaluate_by_events` runs that case.
    """
    if meta_iterations is None:
        meta_iterations = 6 + 3 * len(members)
    in_roll: set[int] = set().union(*[m.rollout_nodes for m in members])
    if not in_roll.isdisjoint(set().union(*[m.train_nodes for m in members])):
        return _evaluate_by_events(members, meta_iterations, switch_s, fifo_rollout)
    # Nodes renumbered densely, in order of first mention (rollout nodes first per member).
    index: dict[int, int] = {}
    roll_nodes: list[list[int]] = []
    train_nodes: list[list[int]] = []
    for m in members:
        ids = []
        for n in m.rollout_nodes:
            ids.append(index.setdefault(n, len(index)))
        roll_nodes.append(ids)
        ids = []
        for n in m.train_nodes:
            ids.append(index.setdefault(n, len(index)))
        train_nodes.append(ids)
    n_nodes = len(index)
    if fifo_rollout:
        # Rollout and training nodes are disjoint here: every rollout node
        # serves first come, first served (`_fifo_periods` finds the same).
        times = [m.times for m in members]
        holds = [t.roll_node_s for t in times]
        ends, period = fifo_train_ends(
            roll_nodes,
            train_nodes,
            [t.roll_s for t in times],
            holds,
            [t.train_s for t in times],
            [t.sync_s for t in times],
            n_nodes,
            meta_iterations,
            switch_s,
            stop_on_repeat=True,
        )
        periods = [period] * len(members) if period is not None else [_steady_period(e) for e in ends]
        return queued_periods(periods, [t.iter_s for t in times], holds, roll_nodes, train_nodes)
    free = [0.0] * n_nodes  # when each node's previous phase ends
    last = [-1] * n_nodes  # its previous phase: 2 * member (+1 for training)
    ready = [0.0] * len(members)  # when each member's next rollout may start
    ends: list[list[float]] = [[] for _ in members]
    phases = [
        (
            2 * j,
            roll_nodes[j],
            m.times.roll_s,
            m.times.roll_node_s,
            2 * j + 1,
            train_nodes[j],
            m.times.train_s,
        )
        for j, m in enumerate(members)
    ]
    syncs = [m.times.sync_s for m in members]
    watch = RepeatWatch(roll_nodes, train_nodes, n_nodes)
    for _ in range(meta_iterations):
        # The rollout and training halves below are the same step written out
        # twice, inline: this loop runs inside every SLO check (bar: 2,000
        # placements in under 1 s of scheduler time).
        for j, (r_ph, r_ns, r_dur, r_hold, t_ph, t_ns, t_dur) in enumerate(phases):
            start, switch = ready[j], 0.0
            for n in r_ns:
                if free[n] > start:
                    start = free[n]
                if last[n] != r_ph and last[n] != -1:
                    switch = switch_s
            # With migration the nodes pass to the next rollout before the
            # stragglers finish (`roll_hold_s`); the job's training waits for all.
            released = start + switch + r_hold
            for n in r_ns:
                free[n], last[n] = released, r_ph
            start, switch = start + switch + r_dur, 0.0
            for n in t_ns:
                if free[n] > start:
                    start = free[n]
                if last[n] != t_ph and last[n] != -1:
                    switch = switch_s
            end = start + switch + t_dur
            for n in t_ns:
                free[n], last[n] = end, t_ph
            ends[j].append(end)
            ready[j] = end + syncs[j]
        repeating = watch.periods(free, last, ready)
        if repeating is not None:
            return repeating  # every later meta-iteration is this one shifted
    # Train end to train end: one rollout, one train and one sync, as solo.
    return locked_periods([_steady_period(e) for e in ends], members)


def _fifo_periods(periods: list[float], members: Sequence[MemberPlan]) -> list[float]:
    """Periods of a run with FIFO rollout nodes, with the queues' mean waits allowed for."""
    train = {n for m in members for n in m.train_nodes}
    fifo = {n for m in members for n in m.rollout_nodes} - train
    periods = with_queueing(
        periods,
        [m.times.iter_s for m in members],
        [list(m.rollout_nodes) for m in members],
        [m.times.roll_node_s for m in members],
        fifo,
    )
    return locked_periods(periods, members, fifo_rollout=True)


def evaluate_on(members: Sequence[MemberPlan], spec: ClusterSpec) -> list[float]:
    """`evaluate_round_robin` with the cluster's switch cost and rollout-node discipline."""
    return evaluate_round_robin(members, switch_s=spec.warm_switch_s, fifo_rollout=spec.rollout_fifo)


def _evaluate_by_events(
    members: Sequence[MemberPlan], meta_iterations: int, switch_s: float, fifo_rollout: bool = False
) -> list[float]:
    """`evaluate_round_robin` by events, for any pinning (nodes may serve both pools).

    Phases are numbered 2*j (rollout of member j) and 2*j+1 (its
    training); nodes are renumbered densely. With `fifo_rollout`, a node
    that serves rollouts only serves them in the order they were queued:
    a queued rollout's key there is its place in the queue, and a member
    with none queued has the key `_IDLE`, after every queued one.
    """
    index: dict[int, int] = {}
    phase_nodes: list[list[int]] = []
    phase_dur: list[float] = []
    phase_hold: list[float] = []  # how long a phase holds its nodes (migration: < its length)
    for m in members:
        for ids, dur, hold in (
            (m.rollout_nodes, m.times.roll_s, m.times.roll_node_s),
            (m.train_nodes, m.times.train_s, m.times.train_s),
        ):
            phase_nodes.append([index.setdefault(n, len(index)) for n in ids])
            phase_dur.append(dur)
            phase_hold.append(min(hold, dur))
    n_nodes = len(index)
    # served[n][j]: (phases member j started on node n, j): its next key there.
    served: list[dict[int, tuple[int, int]]] = [{} for _ in range(n_nodes)]
    for ph, ns in enumerate(phase_nodes):
        for n in ns:
            served[n][ph // 2] = (0, ph // 2)
    fifo: set[int] = set()
    if fifo_rollout:
        in_train = {n for ph in range(1, len(phase_nodes), 2) for n in phase_nodes[ph]}
        fifo = {n for ph in range(0, len(phase_nodes), 2) for n in phase_nodes[ph]} - in_train
        for n in fifo:
            served[n] = {j: (_IDLE, j) for j in served[n]}
    queued = 0  # rollouts queued so far: the FIFO key of the next one
    busy = [False] * n_nodes
    last = [-1] * n_nodes
    pending = [-1] * len(members)  # each member's phase waiting for its nodes
    # (time, seq, what): a phase's end, -1-j a sync end of member j, or
    # RELEASE + phase: its nodes pass on before it ends (migration).
    events: list[tuple[float, int, int]] = []
    release = 2 * len(members)
    ends: list[list[float]] = [[] for _ in members]
    seq = 0

    def try_start(ph: int, now: float) -> None:
        nonlocal seq
        ns = phase_nodes[ph]
        j = ph // 2
        for n in ns:
            if busy[n] or node_turn(served[n]) != j:
                return
        pending[j] = -1
        switch = 0.0
        for n in ns:
            served[n][j] = (_IDLE, j) if n in fifo else (served[n][j][0] + 1, j)
            busy[n] = True
            if last[n] != ph and last[n] != -1:
                switch = switch_s
        seq += 1
        heapq.heappush(events, (now + switch + phase_dur[ph], seq, ph))
        if phase_hold[ph] < phase_dur[ph]:
            seq += 1
            heapq.heappush(events, (now + switch + phase_hold[ph], seq, release + ph))

    def enqueue(ph: int, now: float) -> None:
        nonlocal queued
        pending[ph // 2] = ph
        if fifo and ph % 2 == 0:
            queued += 1
            for n in phase_nodes[ph]:
                if n in fifo:
                    served[n][ph // 2] = (queued, ph // 2)
        try_start(ph, now)

    for j in range(len(members)):
        enqueue(2 * j, 0.0)
    while events:
        now, _, ph = heapq.heappop(events)
        if ph < 0:  # sync ended: the member's next rollout queues
            enqueue(2 * (-1 - ph), now)
            continue
        passing = ph >= release  # nodes pass on before the phase ends (migration)
        ph %= release
        early = phase_hold[ph] < phase_dur[ph]
        if passing or not early:
            for n in phase_nodes[ph]:
                busy[n] = False
                last[n] = ph
        if not passing:  # the phase ended: its job moves on
            j = ph // 2
            if ph % 2 == 0:
                enqueue(ph + 1, now)
            else:
                ends[j].append(now)
                if len(ends[j]) < meta_iterations:
                    seq += 1
                    heapq.heappush(events, (now + members[j].times.sync_s, seq, -1 - j))
            if early:
                continue  # its nodes were handed on already
        for n in phase_nodes[ph]:
            waiting = pending[node_turn(served[n])]
            if waiting >= 0 and not busy[n]:
                try_start(waiting, now)
    # Train end to train end: one rollout, one train and one sync, as solo.
    periods = [_steady_period(e) for e in ends]
    if fifo_rollout:
        return _fifo_periods(periods, members)
    return locked_periods(periods, members)


def evaluate_static_order(
    members: Sequence[MemberPlan],
    sequence: Sequence[int],
    repeats: int = 6,
    switch_s: float = 0.0,
) -> float:
    """Meta-iteration time when every node serves phases in a fixed order.

    `sequence` lists member indices, repeats allowed: each occurrence is one
    iteration (rollout, sync, train) of that member, and every node serves
    the occurrences that touch it in this order. Round robin is the sequence
    0..n-1; any other order is a permutation, possibly with repeats.
    """
    free: dict[int, float] = {}
    last: dict[int, tuple[int, PhaseKind]] = {}
    ready = [0.0] * len(members)  # when each member may start its next rollout
    rep_ends: list[float] = []

    def run(j: int, kind: PhaseKind, ns: tuple[int, ...], earliest: float, dur: float) -> float:
        start = max([earliest] + [free.get(n, 0.0) for n in ns])
        if any(last.get(n, (j, kind)) != (j, kind) for n in ns):
            start += switch_s
        end = start + dur
        for n in ns:
            free[n] = end
            last[n] = (j, kind)
        return end

    for _ in range(repeats):
        rep_end = 0.0
        for j in sequence:
            m = members[j]
            r_end = run(j, PhaseKind.ROLLOUT, m.rollout_nodes, ready[j], m.times.roll_s)
            t_end = run(j, PhaseKind.TRAIN, m.train_nodes, r_end, m.times.train_s)
            ready[j] = t_end + m.times.sync_s
            rep_end = max(rep_end, t_end)
        rep_ends.append(rep_end)
    return _steady_period(rep_ends)
