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
"""

from __future__ import annotations

import heapq


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
) -> list[list[float]]:
    """End of each member's training phase, iteration by iteration.

    Nodes are numbered 0..n_nodes-1, rollout and training nodes disjoint;
    members join at t = 0 in list order. Phase ids for warm-switch
    accounting: 2*j (rollout of member j), 2*j+1 (its training).
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

    while heap:
        ready, _, j = heapq.heappop(heap)
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
    return ends


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
