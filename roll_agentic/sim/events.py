"""The simulator's clock: a heap of timestamped events, FIFO among equal times."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import StrEnum

from roll_agentic.mux.profile import PhaseKind


class EventType(StrEnum):
    ARRIVE = "arrive"  # a trace job arrives and is placed
    PHASE_END = "phase_end"  # a rollout or training phase releases its nodes
    SYNC_END = "sync_end"  # weights reached the rollout side: next rollout may queue
    RELEASE = "release"  # a rollout's stragglers migrated: its nodes pass on before it ends
    REPLAN = "replan"  # re-place the running jobs from scratch; they move between iterations


@dataclass(order=True)
class Event:
    time: float
    seq: int  # ties broken by insertion order, so runs are reproducible
    type: EventType = field(compare=False)
    job_id: str = field(compare=False)
    kind: PhaseKind | None = field(compare=False, default=None)


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(
        self, time: float, type: EventType, job_id: str, kind: PhaseKind | None = None
    ) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(time, self._seq, type, job_id, kind))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float:
        return self._heap[0].time

    def peek(self) -> Event:
        return self._heap[0]

    def __len__(self) -> int:
        return len(self._heap)
