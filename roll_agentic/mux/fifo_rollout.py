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
    # preds[j]: per training node, (member before j in turn order, rounds back).
    preds: list[list[tuple[int, int]]] = []
    succs: list[list[int]] = [[] for _ in range(n)]
    for j, ns in enumerate(train_nodes):
        mine = []
        for x in ns:
            order = on_node[x]
            p = order.index(j)
            before = order[p - 1] if p > 0 else order[-1]
            mine.append((before, 0 if p > 0 else 1))
            succs[before].append(j)
        preds.append(mine)
    trains_done = [0] * n  # trains computed per member
    roll_end = [0.0] * n  # end of each member's latest rollout
    waiting = [False] * n  # a rollout done, its training parked
    ends: list[list[float]] = [[] for _ in range(n)]
    heap = [(0.0, j, j) for j in range(n)]  # (queued at, seq, member)
    seq = n

    def can_train(j: int) -> bool:
        k = trains_done[j]  # the round of the training due
        for before, back in preds[j]:
            if before != j and trains_done[before] < k + 1 - back:
                return False
        return True

    def occupy(nodes: list[int], ready: float, ph: int, hold: float) -> float:
        """Start phase `ph` on `nodes` once ready and free; they pass on after `hold`. Its start."""
        start, switch = ready, 0.0
        for x in nodes:
            if free[x] > start:
                start = free[x]
            if last[x] != ph and last[x] != -1:
                switch = switch_s  # a warm switch from another job's or kind's phase
        start += switch
        for x in nodes:
            free[x], last[x] = start + hold, ph
        return start

    def train(j: int) -> None:
        nonlocal seq
        end = occupy(train_nodes[j], roll_end[j], 2 * j + 1, train_s[j]) + train_s[j]
        trains_done[j] += 1
        ends[j].append(end)
        if trains_done[j] < meta_iterations:
            seq += 1
            heapq.heappush(heap, (end + sync_s[j], seq, j))

    seen: tuple[float, _State] | None = None
    while heap:
        ready, _, j = heapq.heappop(heap)
        if stop_on_repeat and j == 0:
            now = _state(ready, heap, free, last, waiting, roll_end, trains_done)
            if seen is not None and _repeats(now, seen[1]):
                return ends, ready - seen[0]
            seen = (ready, now)
        roll_end[j] = occupy(roll_nodes[j], ready, 2 * j, hold_s[j]) + roll_s[j]
        if not can_train(j):
            waiting[j] = True
            continue
        train(j)
        # Trains parked behind this one may go now, and behind those, others.
        stack = list(succs[j])
        while stack:
            k = stack.pop()
            if waiting[k] and can_train(k):
                waiting[k] = False
                train(k)
                stack.extend(succs[k])
    return ends, None


# A run's state relative to a moment (`_state`): queued rollouts (time, member),
# node free times, nodes' last phases, parked trainings' rollout ends, trainings ahead.
_State = tuple[list[tuple[float, int]], list[float], list[int], list[float | None], list[int]]


def _state(
    t: float,
    heap: list[tuple[float, int, int]],
    free: list[float],
    last: list[int],
    waiting: list[bool],
    roll_end: list[float],
    trains_done: list[int],
) -> _State:
    """Everything the rest of the run depends on, relative to time `t`.

    Queued rollouts in queue order, when each node is free, which phase it
    ran last, each parked training's rollout end, and how many trainings
    each member is ahead of member 0 (the turn rule compares counts). No
    phase computed from here on is ready before `floor` (a queued rollout
    is ready at `t` or later, a parked training when its rollout ended), so
    a node free before then counts as free at `floor`.
    """
    parked = [roll_end[k] for k, w in enumerate(waiting) if w]
    floor = min([t, *parked])
    return (
        [(q - t, k) for q, _, k in sorted(heap)],
        [(f if f > floor else floor) - t for f in free],
        last[:],
        [roll_end[k] - t if w else None for k, w in enumerate(waiting)],
        [d - trains_done[0] for d in trains_done],
    )


def _repeats(now: _State, before: _State) -> bool:
    """Equal states, times within `SHIFT_TOLERANCE_S` (the rule `repeat_watch` uses)."""
    queue, free, last, parked, ahead = now
    queue0, free0, last0, parked0, ahead0 = before
    if last != last0 or ahead != ahead0 or len(queue) != len(queue0):
        return False
    if any(
        k != k0 or abs(q - q0) > SHIFT_TOLERANCE_S
        for (q, k), (q0, k0) in zip(queue, queue0, strict=True)
    ):
        return False
    if any(abs(f - f0) > SHIFT_TOLERANCE_S for f, f0 in zip(free, free0, strict=True)):
        return False
    for p, p0 in zip(parked, parked0, strict=True):
        if (p is None) != (p0 is None) or (p is not None and abs(p - p0) > SHIFT_TOLERANCE_S):
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
    for j, period in enumerate(periods):
        mine = fifo.intersection(roll_nodes[j])
        wait = sum(
            holds[k] * holds[k] / (2.0 * periods[k])
            for k in range(len(periods))
            if k != j and mine.intersection(roll_nodes[k])
        )
        out.append(max(period, iters[j] + wait))
    return out
