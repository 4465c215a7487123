"""Round robin with first-come-first-served rollout nodes, without an event queue.

The schedule (`ClusterSpec.rollout_fifo`): training nodes serve their
members in turns, round after round in join order; rollout nodes serve
queued rollouts in the order they were queued. `round_robin._evaluate_by_events`
runs it by events; this is the same schedule computed by a recursion, for
speed (it runs inside every SLO check; tests check the two agree).

Why a recursion is exact here:
- Rollouts are taken in the order they were queued (a heap on queue time).
  A rollout starts when it is ready and each of its nodes has passed on
  the rollout queued before it there; it then holds the nodes until its
  hold ends. Taking them in queue order is FIFO service, gangs included: a
  node whose head-of-queue gang still waits on another node serves no one
  behind it.
- A training phase starts when its rollout ended and, on each of its
  training nodes, the phase before it in turn order ended. When that
  phase is not known yet the training waits (parked) and is computed as
  soon as it is: trains on a node are computed in turn order.
- Every training computed after taking the rollout queued at t ends after
  t (it waits for that rollout or for a training that did), so the next
  rollouts it queues never precede one already taken: the heap order is
  the queue order.

A run stops once it repeats itself (`stop_on_repeat`, as `repeat_watch`
does for turns on every node): its state when member 0's rollout leaves
the queue is the previous one shifted in time, so every later iteration
is too. Its period is then exact, where a fixed-length run reads a mean
over its second half, which may still hold the settling of the start or
the end of the run (a member whose partners have finished queues behind
no one): on 3,000 random groups the two disagreed in 15, by up to 3.3 %
either way; in 9 the fixed-length run was too fast, which makes an SLO
check optimistic. Groups that share rollout nodes but no training node
keep paces of their own and need not repeat; they run to the fixed length.
"""

from __future__ import annotations

import heapq

from roll_agentic.mux.pace_lock import slowest_linked
from roll_agentic.mux.repeat_watch import SHIFT_TOLERANCE_S


def fifo_train_ends(
    roll_nodes: list[list[int]],
    train_nodes: list[list[int]],
    roll_s: list[float],
    hold_s: list[float],
    train_s: list[float],
    sync_s: list[float],
    n_nodes: int,
    meta_iterations: int,
    switch_s: float,
    stop_on_repeat: bool = False,
) -> tuple[list[list[float]], float | None]:
    """End of each member's training phase, iteration by iteration, and the
    common period if the run repeated itself (`stop_on_repeat`; else None).

    Nodes are numbered 0..n_nodes-1, rollout and training nodes disjoint;
    members join at t = 0 in list order. Phase ids for warm-switch
    accounting: 2*j (rollout of member j), 2*j+1 (its training). With
    `stop_on_repeat` the run ends as soon as its state, taken each time
    member 0's rollout is taken from the queue, is the previous one shifted
    in time (`_state`): every later iteration of every member is then a
    copy shifted by the same period, which is returned (the ends are those
    computed so far).
    """
    n = len(roll_nodes)
    free = [0.0] * n_nodes  # rollout node: its last hold's end; training node: last train's end
    last = [-1] * n_nodes
    # Turn order on each training node: its members in join order.
    on_node: dict[int, list[int]] = {}
    for j, ns in enumerate(train_nodes):
        for x in ns:
            on_node.setdefault(x, []).append(j)
    # preds[j]: per training node, (member before j in turn order, rounds
    # back), others only: a training may go once each has trained enough.
    preds: list[list[tuple[int, int]]] = []
    succs: list[list[int]] = [[] for _ in range(n)]
    for j, ns in enumerate(train_nodes):
        mine = []
        for x in ns:
            order = on_node[x]
            p = order.index(j)
            before = order[p - 1] if p > 0 else order[-1]
            if before != j:
                mine.append((before, 0 if p > 0 else 1))
                # Once `before` trains, j may: j is looked at again. Not j
                # after itself (its training just went), nor twice in a row
                # (the second look would find what the first found).
                if not succs[before] or succs[before][-1] != j:
                    succs[before].append(j)
        preds.append(mine)
    trains_done = [0] * n  # trains computed per member
    roll_end = [0.0] * n  # end of each member's latest rollout
    waiting = [False] * n  # a rollout done, its training parked
    ends: list[list[float]] = [[] for _ in range(n)]
    heap = [(0.0, j, j) for j in range(n)]  # (queued at, seq, member)
    seq = n
    heappop, heappush = heapq.heappop, heapq.heappush
    # A phase starts on its nodes once it is ready and each is free, after a
    # warm switch if any ran another job's or kind's phase last (phase ids:
    # 2*j rollout, 2*j+1 training); they pass on after its hold. Written out
    # inline twice below, not as a helper: this loop runs inside every SLO
    # check (1.4 M phases on 2,000 jobs with every option), where the calls
    # cost a sixth of the run.
    seen: _State | None = None
    stack: list[int] = []  # trainings to look at (see below)
    while heap:
        ready, _, j = heappop(heap)
        if stop_on_repeat and j == 0:
            # The queue in heap order: `_repeats` sorts it if it gets that far (a third do).
            now = (ready, heap[:], free[:], last[:], waiting[:], roll_end[:], trains_done[:])
            # `_repeats` starts with the same test: most states differ there.
            if seen is not None and now[3] == seen[3] and _repeats(now, seen):
                return ends, ready - seen[0]
            seen = now
        ph, start, switch = 2 * j, ready, 0.0
        nodes = roll_nodes[j]
        for x in nodes:
            if free[x] > start:
                start = free[x]
            if last[x] != ph and last[x] != -1:
                switch = switch_s
        start += switch
        passed = start + hold_s[j]
        for x in nodes:
            free[x] = passed
            last[x] = ph
        roll_end[j] = start + roll_s[j]
        # Trains to compute now: this one, if each training node's previous
        # member in turn order has trained enough, then parked ones behind it.
        # (Depth first, this one first: `stack` is empty between rollouts.)
        waiting[j] = True
        k = j
        while True:
            if waiting[k]:
                due = trains_done[k] + 1  # the round of the training due, plus one
                for b, back in preds[k]:
                    if trains_done[b] < due - back:
                        break
                else:
                    waiting[k] = False
                    ph, start, switch = 2 * k + 1, roll_end[k], 0.0
                    nodes = train_nodes[k]
                    for x in nodes:
                        if free[x] > start:
                            start = free[x]
                        if last[x] != ph and last[x] != -1:
                            switch = switch_s
                    start += switch
                    end = start + train_s[k]
                    for x in nodes:
                        free[x] = end
                        last[x] = ph
                    trains_done[k] = due
                    ends[k].append(end)
                    if due < meta_iterations:
                        seq += 1
                        heappush(heap, (end + sync_s[k], seq, k))
                    stack.extend(succs[k])
            if not stack:
                break
            k = stack.pop()
    return ends, None


# A run's state when member 0's rollout leaves the queue: that moment, the
# queued rollouts (in heap order; `_repeats` sorts them), and copies of the
# node free times, the nodes' last phases, which trainings are parked,
# rollout ends and trainings done.
_State = tuple[
    float, list[tuple[float, int, int]], list[float], list[int], list[bool], list[float], list[int]
]


def _repeats(now: _State, before: _State) -> bool:
    """Is the run's state `now` the one `before`, shifted in time?

    Everything the rest of the run depends on, each relative to its own
    moment, within `SHIFT_TOLERANCE_S` (the rule `repeat_watch` uses): the
    queued rollouts in queue order, when each node is free, which phase it
    ran last, each parked training's rollout end, and how many trainings
    each member is ahead of member 0 (the turn rule compares counts). No
    phase computed from a moment on is ready before its floor (a queued
    rollout is ready then or later, a parked training when its rollout
    ended), so a node free before then counts as free at the floor. The
    cheap comparisons go first: most states differ there.
    """
    t, queue, free, last, waiting, roll_end, done = now
    t0, queue0, free0, last0, waiting0, roll_end0, done0 = before
    if last != last0 or waiting != waiting0 or len(queue) != len(queue0):
        return False
    lead, lead0 = done[0], done0[0]
    for d, d0 in zip(done, done0, strict=True):
        if d - lead != d0 - lead0:
            return False
    queue.sort()  # taken in heap order; sorted, the order they leave the queue in
    queue0.sort()
    for (q, _, k), (q0, _, k0) in zip(queue, queue0, strict=True):
        if k != k0 or abs((q - t) - (q0 - t0)) > SHIFT_TOLERANCE_S:
            return False
    floor, floor0 = t, t0
    for k, w in enumerate(waiting):
        if w:
            floor, floor0 = min(floor, roll_end[k]), min(floor0, roll_end0[k])
            if abs((roll_end[k] - t) - (roll_end0[k] - t0)) > SHIFT_TOLERANCE_S:
                return False
    for f, f0 in zip(free, free0, strict=True):
        shift = ((f if f > floor else floor) - t) - ((f0 if f0 > floor0 else floor0) - t0)
        if abs(shift) > SHIFT_TOLERANCE_S:
            return False
    return True


def with_queueing(
    periods: list[float],
    iters: list[float],
    roll_nodes: list[list[int]],
    holds: list[float],
    fifo: set[int],
) -> list[float]:
    """Each member's period, at least its own iteration plus its mean wait in the queues.

    The schedule above runs on typical phase lengths, where the queues
    settle into a pattern with few waits; real lengths vary from iteration
    to iteration and the pattern does not hold. So the plan also allows
    the mean wait of a rollout that arrives at a random moment of each
    other member's cycle: member k holds a shared node for `holds[k]` of
    every `periods[k]`, so it is found there with that probability, and
    then with half its hold left. (Measured on the 200-job trace with
    `--rollout-fifo --share-any --rehome --replan 12`, seeds 0-4: without
    this, a 4-node gang planned at its solo pace ran 5 % slower and missed
    a 1.053 SLO, and a group of six ran 7 % past its plan; with it, every
    SLO was met, for 0.5-2 % more $/h.)
    """
    out = []
    n = len(periods)
    for j, period in enumerate(periods):
        mine = fifo.intersection(roll_nodes[j])
        wait = 0.0
        if mine:
            for k in range(n):
                if k != j and not mine.isdisjoint(roll_nodes[k]):
                    wait += holds[k] * holds[k] / (2.0 * periods[k])
        out.append(max(period, iters[j] + wait))
    return out


def queued_periods(
    periods: list[float],
    iters: list[float],
    holds: list[float],
    roll_nodes: list[list[int]],
    train_nodes: list[list[int]],
) -> list[float]:
    """`round_robin._fifo_periods` for a group whose rollout and training nodes
    are disjoint (every rollout node then serves first come, first served),
    on the dense node ids `fifo_train_ends` ran on: `with_queueing`'s waits,
    in the same order of sums, then paces locked by shared training nodes.
    """
    n = len(periods)
    mine = [set(ns) for ns in roll_nodes]
    out = []
    for j, period in enumerate(periods):
        wait = 0.0
        if roll_nodes[j]:
            shared = mine[j]
            for k in range(n):
                if k != j and not shared.isdisjoint(roll_nodes[k]):
                    wait += holds[k] * holds[k] / (2.0 * periods[k])
        least = iters[j] + wait
        out.append(least if least > period else period)
    return slowest_linked(out, train_nodes)
