"""Run permits: a FIFO of phases per node, as round robin needs them (asyncio).

A job asks for a phase on a set of nodes the moment its previous phase ends
(`round_robin_next` says which); the request joins the FIFO of each of those
nodes at that one instant. A phase starts when it heads all its FIFOs and
all those nodes are free, so the FIFOs agree across nodes and gangs never
deadlock (see roll_agentic/mux/round_robin.py). The board also keeps every
held interval: the busy fractions and the Gantt chart are read from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Interval:
    node: str
    job: str
    kind: str  # rollout | train (probe phases: probe-rollout | probe-train)
    start: float  # seconds since the board's epoch
    end: float
    busy: bool = True  # False: held idle (a probe keeps the other pool to itself)


@dataclass
class _Request:
    key: int
    job: str
    kind: str
    nodes: tuple[str, ...]
    granted: asyncio.Future
    idle: tuple[str, ...] = ()


@dataclass
class NodeState:
    name: str
    pool: str  # rollout | train
    fifo: deque[_Request] = field(default_factory=deque)
    holder: _Request | None = None
    held_since: float = 0.0


class PhaseBoard:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.intervals: list[Interval] = []
        self.epoch = time.time()
        self._keys = itertools.count()

    def add_node(self, name: str, pool: str) -> None:
        self.nodes[name] = NodeState(name, pool)

    def now(self) -> float:
        return time.time() - self.epoch

    @contextlib.asynccontextmanager
    async def hold(self, job: str, kind: str, nodes: Sequence[str],
                   idle: Sequence[str] = ()) -> AsyncIterator[float]:
        """Waits for the phase's turn on every node, holds them, releases on exit (even on cancel).

        `idle` nodes are held too but not worked on (a probe measures a phase alone).
        Yields the seconds spent waiting in the FIFOs.
        """
        req = _Request(next(self._keys), job, kind, (*nodes, *idle), asyncio.get_running_loop().create_future(),
                       tuple(idle))
        t0 = time.time()
        for n in req.nodes:
            self.nodes[n].fifo.append(req)
        self._grant()
        try:
            await req.granted
        except BaseException:
            self._withdraw(req)
            raise
        try:
            yield time.time() - t0
        finally:
            self._release(req)

    def _grant(self) -> None:
        # Whichever request heads all its FIFOs on free nodes starts; repeat until none can.
        progress = True
        while progress:
            progress = False
            for node in self.nodes.values():
                if node.holder is not None or not node.fifo:
                    continue
                req = node.fifo[0]
                ns = [self.nodes[n] for n in req.nodes]
                if all(m.holder is None and m.fifo and m.fifo[0] is req for m in ns):
                    now = self.now()
                    for m in ns:
                        m.fifo.popleft()
                        m.holder, m.held_since = req, now
                    if not req.granted.done():
                        req.granted.set_result(True)
                    progress = True

    def _withdraw(self, req: _Request) -> None:
        for n in req.nodes:
            node = self.nodes[n]
            if req in node.fifo:
                node.fifo.remove(req)
            if node.holder is req:  # granted just as it was cancelled
                self._end(node)
        self._grant()

    def _release(self, req: _Request) -> None:
        for n in req.nodes:
            if self.nodes[n].holder is req:
                self._end(self.nodes[n])
        self._grant()

    def _end(self, node: NodeState) -> None:
        req = node.holder
        assert req is not None
        self.intervals.append(Interval(node.name, req.job, req.kind, node.held_since, self.now(),
                                       busy=node.name not in req.idle))
        node.holder = None

    def snapshot(self) -> dict[str, dict]:
        """Per node: who holds it and who waits, in FIFO order."""
        return {n.name: {"pool": n.pool, "holder": f"{n.holder.job}:{n.holder.kind}" if n.holder else None,
                         "waiting": [f"{r.job}:{r.kind}" for r in n.fifo]} for n in self.nodes.values()}

    def busy_fraction(self, start: float, end: float) -> dict[str, float]:
        """Per pool: held node-seconds / (nodes x wall) over [start, end] (board seconds)."""
        wall = max(end - start, 1e-9)
        out: dict[str, float] = {}
        for pool in sorted({n.pool for n in self.nodes.values()}):
            names = {n.name for n in self.nodes.values() if n.pool == pool}
            busy = sum(max(0.0, min(i.end, end) - max(i.start, start)) for i in self.intervals
                       if i.node in names and i.busy)
            out[pool] = busy / (wall * len(names))
        return out
