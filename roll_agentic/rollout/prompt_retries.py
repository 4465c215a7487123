"""Whether a prompt whose group failed is rolled again, or a fresh prompt takes its place.

A group that comes back without two good episodes is rolled again with the
same prompt (task and seed): dropping prompts that failed for a passing
cause (an engine restart, a reward throttle) would bias the batch against
them. But some prompts fail for good, and rolled again for ever they held
a slot for the rest of the run, or, with `alpha=0` (or in a tail-batching
round, which waits for every prompt), stopped it: one seed of a dataset env
that meets a malformed row, a reward that always raises on one instance, an
env step that hangs on one seed. Each attempt took a group of failures, and
the run ended once `max_failed_in_a_row` of them came in a row, all the same
prompt ("every episode of the last 16 groups failed").

So a prompt is replaced by a fresh one of its task when a re-roll cannot
help: its prompt does not fit the context (`prompt_too_long`), or every
episode of the group failed with an error of the task's own code
(`Trajectory.deterministic`: the same seed meets it again). Any prompt is
replaced after `MAX_ATTEMPTS` failed groups, whatever the cause. A task
whose every prompt fails still stops the run: its groups fail in a row
whichever prompts they hold (`TrajectoryBuffer._raise_if_failing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from roll_agentic.rollout.trajectory import Trajectory

MAX_ATTEMPTS = 3  # failed groups of one prompt before a fresh one takes its place


@dataclass
class PromptRetries:
    """Failed groups per prompt still rolled again (only those: an entry goes once it is dropped)."""

    attempts: dict[tuple[str, int], int] = field(default_factory=dict)

    def replace(self, task: str, seed: int, members: Sequence[Trajectory]) -> bool:
        """After a group of prompt (`task`, `seed`) failed with `members`: True if a fresh
        prompt takes its place, False if it is rolled again."""
        key = (task, seed)
        fails_for_good = any(t.status == "prompt_too_long" for t in members) or (
            bool(members) and all(t.status != "ok" and t.deterministic for t in members))
        tries = self.attempts.get(key, 0) + 1
        if fails_for_good or tries >= MAX_ATTEMPTS:
            self.attempts.pop(key, None)
            return True
        self.attempts[key] = tries
        return False

    def succeeded(self, task: str, seed: int) -> None:
        """The prompt's group came back good: its failed attempts are forgotten."""
        self.attempts.pop((task, seed), None)
