"""The scheduler-policy seam shared by the simulator and the multiplexer.

A policy answers two questions and keeps no clock of its own:
- `place`: given the current groups and an arriving job's (worst-case)
  profile, where does the job go?
- `next_phases`: given a group and the phase a member just finished, which
  phases does that member enqueue next, on which nodes?

The simulator calls both from its event loop; the real multiplexer will call
them from its Ray actors. Nothing behind this seam may import either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from roll_agentic.mux.group import Group, Placement
from roll_agentic.mux.profile import JobProfile, PhaseKind
from roll_agentic.mux.round_robin import PhaseSpec, round_robin_next


class SchedulerPolicy(Protocol):
    name: str

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement: ...

    def next_phases(
        self, group: Group, job_id: str, finished: PhaseKind | None
    ) -> list[PhaseSpec]: ...


class RoundRobinPhases:
    """Mixin: the intra-group order every shipped policy uses."""

    def next_phases(self, group: Group, job_id: str, finished: PhaseKind | None) -> list[PhaseSpec]:
        return round_robin_next(group.pinning[job_id], job_id, finished)
