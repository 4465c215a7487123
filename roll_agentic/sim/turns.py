"""Whose turn it is on each node of the simulated cluster (round robin).

Every node serves the jobs pinned to it in turns (`round_robin.node_turn`):
the job of the lowest (round, join order) goes next, and the node waits for
it even when another job's phase is ready. A job's round on a node is the
round it joined in plus the phases it has started there since, so one
rollout and one training phase per job per meta-iteration, as in the plans.

Joining is the delicate part. Partners that share a node keep within a
round of each other, but partners of one group that share none drift
apart (each at its own pace), and a newcomer may tie such sets together:
given the leading round it would starve on the nodes of the lagging set
until that set caught up; given the lagging one it would lap the leading
set. So on a join each set of partners linked by shared nodes is first
renumbered so that its leading round is round 0 (order within a set is
kept), and the newcomer starts at round 0, last in join order: after its
partners' phases of this round, before their next ones. Renumbering keeps
every gang's key equal on all its nodes, so no gang deadlocks.

Rollout nodes in `fifo` (`ClusterSpec.rollout_fifo`) take no turns: they
serve the rollouts queued on them in the order they were queued. A gang's
key there is its place in that one queue, the same on all its nodes, so
gangs cannot deadlock there either; and such nodes link no partners when
a newcomer joins (there is no round to align).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from roll_agentic.mux.round_robin import node_turn


@dataclass
class NodeTurns:
    served: dict[int, dict[str, int]] = field(default_factory=dict)  # node: job: phases started
    nodes_of: dict[str, tuple[int, ...]] = field(default_factory=dict)
    round0: dict[str, int] = field(default_factory=dict)  # the round a job's counts start from
    done: dict[str, int] = field(default_factory=dict)  # iterations completed since joining
    seq: dict[str, float] = field(default_factory=dict)  # join order (or a planned one)
    joins: int = 0
    fifo: set[int] = field(default_factory=set)  # rollout nodes that serve in queue order
    queued: dict[str, int] = field(default_factory=dict)  # job: its queued rollout's place
    _queue_len: int = 0

    def round(self, job_id: str) -> int:
        return self.round0[job_id] + self.done[job_id]

    def join(
        self,
        job_id: str,
        node_ids: Iterable[int],
        partners: Iterable[str],
        order: float | None = None,
    ) -> None:
        """Give `job_id` turns on its nodes from the round its group's `partners` are in.

        `order`: its place among jobs of the same round, when a re-plan chose
        it (`replan.py`: members move in as their iterations end, but keep
        the plan's order); by default, after everyone who joined before.
        """
        linked = {j: j for j in partners}  # union-find over partners sharing nodes

        def root(j: str) -> str:
            while linked[j] != j:
                j = linked[j]
            return j

        for j in linked:
            for nid in self.nodes_of[j]:
                if nid in self.fifo:
                    continue
                for k in self.served[nid]:
                    linked[root(k)] = root(j)
        lead: dict[str, int] = {}
        for j in linked:
            r = root(j)
            lead[r] = max(lead.get(r, self.round(j)), self.round(j))
        for j in linked:
            self.round0[j] -= lead[root(j)]
        nodes = tuple(sorted(set(node_ids)))
        self.nodes_of[job_id] = nodes
        self.round0[job_id], self.done[job_id] = 0, 0
        self.seq[job_id] = self.joins if order is None else order
        self.joins += 1
        for nid in nodes:
            self.served.setdefault(nid, {})[job_id] = 0

    def leave(self, job_id: str) -> tuple[int, ...]:
        """Drop a job's turns; returns the nodes it held turns on."""
        nodes = self.nodes_of.pop(job_id)
        for nid in nodes:
            del self.served[nid][job_id]
            if not self.served[nid]:
                del self.served[nid]
        for d in (self.round0, self.done, self.seq):
            del d[job_id]
        self.queued.pop(job_id, None)
        return nodes

    def repin(self, job_id: str, drop: Iterable[int], add: Iterable[int]) -> None:
        """Between its iterations, a job leaves the turns of `drop` and joins those of
        `add` (`GroupBook.repin_rollout`), at the round it is in on its other nodes."""
        gone, added = set(drop), set(add)
        for nid in gone:
            del self.served[nid][job_id]
            if not self.served[nid]:
                del self.served[nid]
        for nid in added:
            # One rollout per iteration started there since joining, like its other rollout nodes.
            self.served.setdefault(nid, {})[job_id] = self.done[job_id]
        self.nodes_of[job_id] = tuple(sorted((set(self.nodes_of[job_id]) - gone) | added))

    def turn(self, node_id: int) -> str | None:
        """The job whose phase this node serves next; None if none is pinned."""
        on = self.served.get(node_id)
        if not on:
            return None
        if node_id in self.fifo:
            waiting = [(self.queued[j], j) for j in on if j in self.queued]
            return min(waiting)[1] if waiting else None
        return node_turn({j: (self.round0[j] + n, self.seq[j]) for j, n in on.items()})

    def holds_turn(self, job_id: str, node_ids: Iterable[int]) -> bool:
        return all(self.turn(nid) == job_id for nid in node_ids)

    def queue_rollout(self, job_id: str) -> None:
        """A rollout of `job_id` waits: its place in the queue of the FIFO nodes."""
        self._queue_len += 1
        self.queued[job_id] = self._queue_len

    def started(self, job_id: str, node_ids: Iterable[int]) -> None:
        self.queued.pop(job_id, None)
        for nid in node_ids:
            self.served[nid][job_id] += 1

    def iteration_done(self, job_id: str) -> None:
        self.done[job_id] += 1
