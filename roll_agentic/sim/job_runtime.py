"""What the simulator tracks per running job and per open node, between events."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roll_agentic.mux.group import Group, Node
from roll_agentic.mux.profile import ClusterSpec, PhaseKind
from roll_agentic.mux.round_robin import PhaseSpec
from roll_agentic.sim.trace import TraceJob


@dataclass
class JobRuntime:
    """A running job: its per-iteration length factors, where it is pinned, where it stands."""

    trace: TraceJob
    roll_f: np.ndarray
    train_f: np.ndarray
    group_id: int = -1
    iters_done: int = 0
    last_end: float = 0.0
    cold: set[PhaseKind] = field(default_factory=set)  # phases whose state is not resident yet
    tried_at: int = 0  # how many group changes it has already tried (regrouping)
    seen_with: tuple[str, ...] = ()  # its group's members when it last tried
    content_with: tuple[str, ...] = ()  # members with which no move could pay (rehome)
    trimmed_with: tuple[int, int] = (-1, -1)  # (group, `Group.version`) when it last looked at trims
    # (group, `Group.version`) when `alone_on` (`paid_alone`) was last taken, and its value.
    alone_key: tuple[int, int] = (-1, -1)
    alone_on: float | None = None
    pending: PhaseSpec | None = None  # queued, waiting for its turn or its nodes
    handed_on: bool = False  # its running rollout already passed its nodes on (migration)
    # Solo seconds of its first k iterations, at [k]: read at every iteration
    # end (SLO checks of moves, banked slack), so summed once.
    _solo_upto: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        p = self.trace.profile
        solo = p.roll_s * self.roll_f + p.sync_s + p.train_s * self.train_f
        self._solo_upto = np.concatenate(([0.0], np.cumsum(solo)))

    def solo_done_s(self) -> float:
        """How long the iterations it completed take alone."""
        return float(self._solo_upto[self.iters_done])


@dataclass
class NodeRuntime:
    """An open node: busy or not, and whose phase it ran last (switch costs)."""

    node: Node
    busy: bool = False
    last: tuple[str, PhaseKind] | None = None


def paid_alone(group: Group, job_id: str, spec: ClusterSpec) -> float | None:
    """$/h of the nodes only `job_id` uses, if it is alone on its training nodes; else None.

    Such a job pays for its dear nodes as if it ran solo, whether or not
    it shares rollout nodes with others of its group: a move that costs
    less than this is worth a cold start. A job alone in its group pays
    the whole group.
    """
    if any(group.nodes[n].jobs != [job_id] for n in group.pinning[job_id].train_nodes):
        return None
    return group.own_cost_per_hour(job_id, spec)
