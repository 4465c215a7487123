"""Each step's batch in the tasks' shares (`tasks[*].weight`), not in the order groups finish.

Tickets go out in the tasks' weights (the buffer's smooth weighted round
robin), but groups finish in their own time: a task of short episodes fills
the ready queue first. A step that took the first groups to finish trained
on whichever task was quicker at that moment; after a resume, when a whole
step's prompts are re-issued at once, a two-task run trained one step on
one task alone and the next on the other (the console then showed `nan`
for the task a step lacked).

So a step's batch takes each task's share of its groups, its slots dealt by
the same smooth weighted round robin as the tickets (its own credit, saved
with the checkpoint), and waits for a task short of its share while a group
of that task can still arrive. It never waits for a task with nothing on
the way (its groups all dropped as prompt-too-long, or held for the next
step): the other tasks' groups then fill its slots, in the order they
finished. The groups left over stay ready for the next step, oldest first,
and are dropped as stale like any other past the staleness bound.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from roll_agentic.rollout.trajectory import Trajectory


class Weighted(Protocol):
    name: str
    weight: float


class StepMix:
    """The slots of each step's batch by task, and the batch taken from the ready groups."""

    def __init__(self, tasks: Sequence[Weighted]):
        self.tasks = list(tasks)
        self.credit = {t.name: 0.0 for t in tasks}
        # The credit as of the last trained step: a batch taken and then given back untrained
        # (a stop before its update) is dealt again with this, the same split of tasks.
        self.committed = dict(self.credit)

    def commit(self) -> None:
        """The batch taken was trained: its credit is the one a redone step starts from."""
        self.committed = dict(self.credit)

    def quotas(self, num_groups: int) -> tuple[dict[str, int], dict[str, float]]:
        """Groups of each task in a batch of `num_groups`, and the credit after dealing them."""
        credit = dict(self.credit)
        total = sum(t.weight for t in self.tasks)
        quota = {t.name: 0 for t in self.tasks}
        for _ in range(num_groups):
            for t in self.tasks:
                credit[t.name] += t.weight
            best = max(self.tasks, key=lambda t: credit[t.name])
            credit[best.name] -= total
            quota[best.name] += 1
        return quota, credit

    def take(self, ready: deque[list[Trajectory]], num_groups: int,
             on_the_way: Callable[[str], bool]) -> list[list[Trajectory]] | None:
        """The batch, taken out of `ready`; None while a short task's groups may still come.

        `on_the_way(task)`: may a group of `task` still finish for this step?"""
        quota, credit = self.quotas(num_groups)
        have: dict[str, int] = {}
        for group in ready:
            have[group[0].task] = have.get(group[0].task, 0) + 1
        if any(have.get(task, 0) < n and on_the_way(task) for task, n in quota.items()):
            return None
        short = sum(max(0, n - have.get(task, 0)) for task, n in quota.items())
        if short and len(ready) < num_groups:
            return None  # not even the others' groups fill the batch yet
        picked, spare = [], deque()
        left = dict(quota)
        for group in ready:
            task = group[0].task
            if left.get(task, 0) > 0:
                left[task] -= 1
                picked.append(group)
            else:
                spare.append(group)
        while short and spare:  # a short task's slots, to the others' oldest groups
            picked.append(spare.popleft())
            short -= 1
        ready.clear()
        ready.extend(spare)
        self.credit = credit
        return picked
