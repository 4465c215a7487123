"""What the multiplexer knows about each job: the record `mux status` prints."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from enum import StrEnum


class JobState(StrEnum):
    PROFILING = "profiling"  # its probe iteration runs (one rollout, one train phase)
    QUEUED = "queued"  # profiled; fits no group now; `reason` says why
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REFUSED = "refused"  # can never run here (e.g. its state exceeds the residency budget)
    STOPPED = "stopped"  # `mux run` stopped (Ctrl-C, SIGTERM): checkpointed, `mux run --resume` goes on

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.REFUSED, JobState.STOPPED)


# `first_admitted_end` of a record that does not say (one saved before records had it): the
# probe's default `profile_steps` (mux_config.py) came before its first admitted step.
DEFAULT_FIRST_ADMITTED_END = 2


def iteration_times(step_ends: list[float], first_admitted_end: int) -> list[float]:
    """Train end to train end from the first admitted step's end: the iteration ending there
    held the wait for placement and the cold switch-in, not a step of the co-run."""
    ends = step_ends[first_admitted_end:]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


@dataclass
class PendingRollback:
    """A job marked to go back to its checkpoint, not gone back yet: its newest state died with
    a trainer process, and its next train phase rolls it back (`JobRunner._roll_back`)."""

    to_step: int  # the step of the checkpoint it goes back to (0: none, from the start)
    why: str


@dataclass
class JobRecord:
    name: str
    slo: float
    total_steps: int
    run_dir: str = ""
    state: JobState = JobState.PROFILING
    reason: str = ""  # why it waits, was refused, or failed
    phase: str = ""  # e.g. "rollout", "waiting train"
    group: int | None = None
    nodes: list[str] = field(default_factory=list)
    step: int = 0
    resumed_from: int = 0  # the checkpoint's step it went on from (`mux run --resume`); 0: from the start
    submitted_at: float = 0.0  # board seconds
    finished_at: float = 0.0
    profile: dict[str, float] = field(default_factory=dict)  # worst-case roll_s/train_s/sync_s, bytes
    step_ends: list[float] = field(default_factory=list)  # board seconds at each train-phase end
    # Index in `step_ends` of its first admitted step's end (the probe's `profile_steps` come
    # before): iterations count from there. A fixed 2 took the placement wait and the cold
    # switch-in for an iteration when the probe took more steps, reading as a missed SLO.
    first_admitted_end: int = DEFAULT_FIRST_ADMITTED_END
    switches: list[dict] = field(default_factory=list)  # SwitchRecord of each train switch-in
    # "step V -> N: why" for each time its state was lost and it went back to a checkpoint
    rollbacks: list[str] = field(default_factory=list)
    # Set from the mark to the end of the roll-back: until then the job looked healthy in
    # `mux status` while the steps it showed past its checkpoint were already lost.
    pending_rollback: PendingRollback | None = None

    def iteration_times(self) -> list[float]:
        """Train end to train end, past the probe and the first admitted step."""
        return iteration_times(self.step_ends, self.first_admitted_end)

    def mean_iteration_s(self) -> float | None:
        its = self.iteration_times()
        return statistics.fmean(its) if its else None

    def switch_s(self, kind: str) -> float | None:
        xs = [s["in_s"] for s in self.switches if s["kind"] == kind]
        return statistics.median(xs) if xs else None

    def slowdown_estimate(self) -> float | None:
        """Live SLO standing: measured iteration / the profiled (worst-case) solo iteration."""
        it, solo = self.mean_iteration_s(), self.profile.get("solo_iter_s")
        return it / solo if it is not None and solo else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["state"] = str(self.state)
        d["mean_iteration_s"] = self.mean_iteration_s()
        d["slowdown_estimate"] = self.slowdown_estimate()
        d["warm_switch_s"] = self.switch_s("warm")
        d["cold_switch_s"] = self.switch_s("cold")
        return d


def format_status(snapshot: dict) -> str:
    """The text of `roll-agentic mux status`: groups, jobs, phases, SLO standing."""
    lines = [f"multiplexer {snapshot['name']}  run dir {snapshot['run_dir']}  up {snapshot['uptime_s']:.0f}s"]
    busy = "  ".join(f"{p} {f:.0%}" for p, f in snapshot.get("pool_busy_fraction", {}).items())
    lines.append(f"pools busy: {busy or '-'}")
    restarts = snapshot.get("trainer_restarts", {})
    for node, n in snapshot.get("nodes", {}).items():
        again = f"  trainer restarted {restarts[node]}x" if restarts.get(node) else ""
        lines.append(f"  node {node} ({n['pool']}): holder {n['holder'] or '-'}  waiting {n['waiting'] or '-'}{again}")
    lines.append("groups:")
    for g in snapshot.get("groups", []):
        lines.append(f"  group {g['group_id']}: nodes {g['nodes']}  members {g['members']}")
    if not snapshot.get("groups"):
        lines.append("  (none)")
    lines.append("jobs:")
    for j in snapshot.get("jobs", []):
        est = j.get("slowdown_estimate")
        # Against the profile, which is worst case (profile_margin): below 1x is common and
        # the run's summary, against the measured solo pass, reads higher.
        slo = f"slowdown {est:.2f}x of profile / SLO {j['slo']:.2f}x" if est else f"SLO {j['slo']:.2f}x"
        where = f"group {j['group']}" if j.get("group") is not None else "-"
        line = (f"  {j['name']:<14} {j['state']:<10} step {j['step']}/{j['total_steps']}  "
                f"phase {j['phase'] or '-':<14} {where:<8} {slo}")
        pending = j.get("pending_rollback")
        if pending:  # shown from the mark on: the steps past that checkpoint are lost already
            to = f"its checkpoint of step {pending['to_step']}" if pending["to_step"] else "step 0 (no checkpoint)"
            doing = "rolling back" if j.get("phase") == "rolling back" else "waiting to roll back"
            line += f"  {doing} to {to} ({pending['why']})"
        if j.get("resumed_from"):
            line += f"  resumed from step {j['resumed_from']}"
        if j.get("rollbacks"):
            line += f"  rolled back {len(j['rollbacks'])}x (last: {j['rollbacks'][-1]})"
        if j.get("reason"):
            line += f"  reason: {j['reason']}"
        lines.append(line)
    return "\n".join(lines)
