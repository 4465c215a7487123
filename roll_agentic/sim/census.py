"""Where a run's money goes by group: how much buys multiplexing, how much runs alone, and why.

A group's nodes cost their $/h whatever shares them. The census follows
every group from one change of its members or nodes to the next and books
each stretch's cost under the group's member count; a group of one member
(a job running as it would under solo) is booked under that job's SLO as
well. Judged by the SLO the job was submitted with, in bands: under 1.05 a
job tolerates less slowdown than RollMux keeps back for run-time variance
(`placement.SLO_HEADROOM`), so it can never share; the higher the band, the
more room a partner has. The stretches add up to the run's node cost
exactly (`SimResult.total_cost`): the simulator opens and closes nodes only
with such changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from roll_agentic.mux.group import Group
from roll_agentic.mux.placement import SLO_HEADROOM
from roll_agentic.mux.profile import ClusterSpec

_NEVER_SHARES = 1.0 + SLO_HEADROOM  # SLOs below this run alone for life
# (upper bound, label) of the SLO bands a lone job's cost is booked under.
SLO_BANDS: tuple[tuple[float, str], ...] = (
    (_NEVER_SHARES, f"<{_NEVER_SHARES:g}"),
    (1.2, f"{_NEVER_SHARES:g}-1.2"),
    (1.5, "1.2-1.5"),
    (float("inf"), ">=1.5"),
)
LARGEST_SIZE = 4  # groups of this many members or more are booked together ("4+")


def slo_band(slo: float) -> str:
    """The label of the band `slo` falls in (`SLO_BANDS`)."""
    return next(label for bound, label in SLO_BANDS if slo < bound)


def size_label(members: int) -> str:
    return f"{LARGEST_SIZE}+" if members >= LARGEST_SIZE else str(members)


@dataclass
class GroupCensus:
    """$ per group size and per lone job's SLO band, booked stretch by stretch (`update`)."""

    spec: ClusterSpec
    by_size: dict[str, float] = field(default_factory=dict)
    alone_by_slo: dict[str, float] = field(default_factory=dict)
    # Per live group: since when, its $/h, its size label, its lone member's SLO band (or None).
    _live: dict[int, tuple[float, float, str, str | None]] = field(default_factory=dict)

    def update(
        self, group_id: int, group: Group | None, now: float, slo_of: Callable[[str], float]
    ) -> None:
        """Book the group's stretch up to `now`; start its next one (none once it has no members)."""
        self._book(group_id, now)
        if group is None or not group.members:
            return
        band = slo_band(slo_of(next(iter(group.members)))) if len(group.members) == 1 else None
        self._live[group_id] = (
            now,
            group.cost_per_hour(self.spec),
            size_label(len(group.members)),
            band,
        )

    def close(self, now: float) -> None:
        """Book every live group's stretch up to the end of the run."""
        for group_id in list(self._live):
            self._book(group_id, now)

    def _book(self, group_id: int, now: float) -> None:
        live = self._live.pop(group_id, None)
        if live is None:
            return
        since, per_hour, size, band = live
        spent = per_hour * (now - since) / 3600.0
        self.by_size[size] = self.by_size.get(size, 0.0) + spent
        if band is not None:
            self.alone_by_slo[band] = self.alone_by_slo.get(band, 0.0) + spent
