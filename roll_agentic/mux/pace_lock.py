"""Members linked by shared nodes run at the slowest one's pace: the arithmetic.

`round_robin.locked_periods` says why; this is its inner step, kept apart
so that the FIFO evaluator (`fifo_rollout.queued_periods`), which already
holds the members' nodes as dense ids, takes it without rebuilding them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def slowest_linked(periods: Sequence[float], nodes: Sequence[Iterable[int]]) -> list[float]:
    """Each member's period raised to the slowest of those it shares a node in `nodes` with.

    `nodes[i]`: the nodes that link member i. Components by relabelling (as
    `repeat_watch` does): groups have a handful of members, and this runs
    for every SLO check and bound. A component's slowest is taken as
    `max(slowest so far, t)` from 0.0 in member order.
    """
    comp: list[int] | None = None  # built at the first shared node
    owner: dict[int, int] = {}
    for i, ns in enumerate(nodes):
        for n in ns:
            j = owner.setdefault(n, i)
            if j != i:
                if comp is None:
                    comp = list(range(len(periods)))
                if comp[i] != comp[j]:
                    old, keep = comp[i], comp[j]
                    comp = [keep if c == old else c for c in comp]
    if comp is None:  # no node shared: each member its own component
        return [t if t > 0.0 else 0.0 for t in periods]
    slowest: dict[int, float] = {}
    for c, t in zip(comp, periods, strict=True):
        s = slowest.get(c, 0.0)
        slowest[c] = t if t > s else s
    return [slowest[c] for c in comp]
