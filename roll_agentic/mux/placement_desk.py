"""The multiplexer's queue: profiled jobs waiting for a place, placed together.

Whenever something changes (a job was profiled, a job left), every waiting
job is placed at once with the policy's batch placement (`batch.py`): jobs
queued behind a full cluster are known together, so their order and
grouping are searched instead of being decided by which waiter woke first.
A plan's step that needs more free physical nodes than there are stops the
plan there; that job keeps waiting and the others are planned again
without it, so a small job is never held up behind a large one.

Plain bookkeeping on the group book and the names of free nodes; the
multiplexer does the Ray work (residency reservations, wake-ups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from roll_agentic.mux import admission
from roll_agentic.mux.batch import ScratchIds
from roll_agentic.mux.group import Group, GroupBook
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.profile import JobProfile, Pool


@dataclass(frozen=True)
class Admitted:
    name: str
    group: Group
    opened: dict[int, str]  # book node id -> physical node it was given


class PlacementDesk:
    def __init__(self, book: GroupBook, policy: RollMuxPolicy) -> None:
        self.book, self.policy = book, policy
        self.waiting: dict[str, JobProfile] = {}  # queue order

    def add(self, profile: JobProfile) -> None:
        self.waiting[profile.job_id] = profile

    def drop(self, name: str) -> None:
        self.waiting.pop(name, None)

    def place_waiting(
        self, free_rollout: Sequence[str], free_train: Sequence[str]
    ) -> tuple[list[Admitted], dict[str, str]]:
        """Place every waiting job that fits now.

        Returns the jobs placed (removed from the queue, applied to the book)
        and, for each job still waiting, why.
        """
        free = {Pool.ROLLOUT: list(free_rollout), Pool.TRAIN: list(free_train)}
        admitted: list[Admitted] = []
        blocked: set[str] = set()  # jobs whose step found too few free nodes
        todo = list(self.waiting.values())
        while todo:
            steps = self.policy.place_batch(self.book.groups, todo)
            ids = ScratchIds()
            stuck = None
            for step in steps:
                p = step.placement
                if p.new_rollout > len(free[Pool.ROLLOUT]) or p.new_train > len(free[Pool.TRAIN]):
                    stuck = step.job  # the steps after it may build on it: plan again
                    break
                group, opened = ids.apply(self.book, step)
                names = {n.node_id: free[n.pool].pop(0) for n in opened}
                admitted.append(Admitted(step.job.job_id, group, names))
                del self.waiting[step.job.job_id]
            if stuck is None:
                break
            blocked.add(stuck.job_id)
            todo = [j for j in self.waiting.values() if j.job_id not in blocked]
        reasons = {
            j.job_id: admission.queue_reason(
                self.book.groups,
                j,
                self.policy.spec,
                self.policy.headroom,
                len(free[Pool.ROLLOUT]),
                len(free[Pool.TRAIN]),
            )
            for j in self.waiting.values()
        }
        return admitted, reasons
