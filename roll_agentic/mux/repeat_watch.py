"""Ending a round-robin run once it repeats itself.

`round_robin.evaluate_round_robin` runs a group's schedule meta-iteration by
meta-iteration, and its state after each one is: when every node is next
free and which phase it ran last, and when every member may start its next
rollout. Each step only takes maxima of and adds constants to that state,
so if the state after a meta-iteration is the one before shifted by the same
P on every node and member that interact, every later meta-iteration is a
copy shifted by P: the members' steady period is exactly P, and running on
changes nothing but the time it takes. Members that share no node with each
other (directly or not) are independent and may shift by different P.

Most groups repeat after two or three meta-iterations, while the fixed run
length allows for slow-settling gangs (6 + 3 per member); the SLO check runs
thousands of times per trace, so stopping early matters.
"""

from __future__ import annotations

from collections.abc import Sequence

# Seconds two shifts may differ by and still count as equal: far below any
# phase length, far above the rounding error of a run's sums.
SHIFT_TOLERANCE_S = 1e-6


class RepeatWatch:
    """Compares each meta-iteration's end state with the previous one's."""

    def __init__(
        self,
        roll_nodes: Sequence[Sequence[int]],
        train_nodes: Sequence[Sequence[int]],
        n_nodes: int,
    ):
        # Components by relabelling: groups have a handful of nodes, and a
        # plain list beats a union-find's calls at that size.
        comp = list(range(n_nodes))
        for r_ns, t_ns in zip(roll_nodes, train_nodes, strict=True):
            ns = (*r_ns, *t_ns)
            keep = comp[ns[0]]
            for n in ns[1:]:
                old = comp[n]
                if old != keep:
                    comp = [keep if c == old else c for c in comp]
        self._node_root = comp
        # A member's component: that of its first node (every member has one).
        self._member_root = [comp[(*r, *t)[0]] for r, t in zip(roll_nodes, train_nodes, strict=True)]
        self._free: list[float] | None = None
        self._last: list[int] = []
        self._ready: list[float] = []

    def periods(self, free: list[float], last: list[int], ready: list[float]) -> list[float] | None:
        """Each member's period if this state repeats the previous one shifted; else None.

        The state is remembered for the next call either way.
        """
        prev_free, prev_last, prev_ready = self._free, self._last, self._ready
        self._free, self._last, self._ready = free[:], last[:], ready[:]
        if prev_free is None or last != prev_last:
            return None
        shift: dict[int, float] = {}
        for j, c in enumerate(self._member_root):
            d = ready[j] - prev_ready[j]
            known = shift.setdefault(c, d)
            if abs(d - known) > SHIFT_TOLERANCE_S:
                return None
        for n, c in enumerate(self._node_root):
            if abs(free[n] - prev_free[n] - shift[c]) > SHIFT_TOLERANCE_S:
                return None
        return [shift[c] for c in self._member_root]
