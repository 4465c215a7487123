"""What a step that waits long for its rollout says while it waits.

A step waits on the trajectory buffer for its groups. When every episode
fails, groups are re-rolled until the buffer gives up
(`TrajectoryBuffer._raise_if_failing`): at once when the task's own code
fails every episode (a reward function that raises on longer episodes, an
env that breaks after its first step), after `rollout.max_failing_s` (300 s)
when the failures may pass (a restarting engine or emulator is not a broken
one). Until then nothing was printed: the run looked hung, and the cause was
only in a log file. Now, once trajectories fail during the wait or it passes
`QUIET_S`, a line every `EVERY_S` says how many groups are ready, what failed
since the step began, the last error, and which of the two stops applies.
"""

from __future__ import annotations

import time
from collections.abc import Callable

QUIET_S = 120.0  # a healthy step may wait this long (vLLM's first step on CPU: ~35 s)
EVERY_S = 30.0


class RolloutWaitReporter:
    """Lines for one step's wait; `status()` reads the buffer (`TrajectoryBuffer.wait_status`)."""

    def __init__(self, step: int, wanted: int, status: Callable[[], dict],
                 say: Callable[[str], None] = lambda line: print(line, flush=True)):
        self.step, self.wanted, self.status, self.say = step, wanted, status, say
        self.t0 = time.monotonic()
        self.last_said = self.t0
        self._failed_at_start: dict[str, int] | None = None

    def started(self) -> None:
        """Take the failure counts the step starts from (what failed before is not news)."""
        self._failed_at_start = dict(self.status()["failures"])

    def tick(self, now: float | None = None) -> str | None:
        """Called while the step waits; the line said, if one was due."""
        now = time.monotonic() if now is None else now
        if now - self.last_said < EVERY_S:
            return None
        st = self.status()
        before = self._failed_at_start or {}
        new = {k: n - before.get(k, 0) for k, n in st["failures"].items() if n > before.get(k, 0)}
        if not new and now - self.t0 < QUIET_S:
            return None
        self.last_said = now
        line = (f"step {self.step}: waiting {now - self.t0:.0f} s for the rollout: "
                f"{min(st['ready'], self.wanted)} of {self.wanted} groups ready, {st['open']} under way")
        if new:
            failed = ", ".join(f"{k} {n}" for k, n in sorted(new.items()))
            line += (f"; trajectories failed since the step began: {failed}; last: {st['last_error'][:300]}. "
                     f"Failed groups are rolled out again; {_stop_rule(st)}")
        self.say(line)
        return line


def _stop_rule(st: dict) -> str:
    """Which stop applies to the failures so far (`TrajectoryBuffer.failing`)."""
    limit, window = st.get("max_failed_in_a_row", 16), st.get("max_failing_s", 300.0)
    deterministic, in_a_row = st.get("deterministic_in_a_row", 0), st.get("failed_in_a_row", 0)
    if deterministic:
        return (f"every episode of the last {deterministic} groups failed in the task's own code (a re-roll "
                f"meets it again): at {limit} such groups in a row the run stops, without waiting "
                f"{window:g} s")
    if in_a_row:
        return (f"{in_a_row} groups in a row failed, for causes that may pass (engines, services, time-outs): "
                f"if every group fails for {window:g} s ({st.get('failing_for_s', 0.0):.0f} s so far) "
                f"the run stops")
    return f"if every group fails for {window:g} s the run stops"
