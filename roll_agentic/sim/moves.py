"""Changes to running jobs between their iterations, as the simulator makes them.

A job's nodes hold none of its phases between two iterations, so that is
when RollMux may change its placement: move a job left alone in its group
(`_regroup`; any member with `rehome`), run its rollouts on fewer or
partners' nodes (`_trim`), re-target its SLO to what its whole run can
still take (`_bank`), or move it where a re-plan placed it (`_replan`,
`_move_to`). Every move is held to what the job's SLO can still absorb
(`_move_keeps_slo`). `ClusterSimulator` mixes this in; it owns the state
named below and the node and turn bookkeeping (`_open`, `_release`,
`_join`, `_leave`) these methods call.
"""

from __future__ import annotations

import time as wallclock
from collections.abc import Callable, Mapping

from roll_agentic.mux.group import Group, GroupBook, Node
from roll_agentic.mux.group_view import slo_budget
from roll_agentic.mux.policy import SchedulerPolicy
from roll_agentic.mux.profile import ClusterSpec, PhaseKind
from roll_agentic.mux.slack import remaining_slo
from roll_agentic.sim.job_runtime import JobRuntime, paid_alone
from roll_agentic.sim.replan import Replanner, Target, move_keeps_slo
from roll_agentic.sim.turns import NodeTurns


class JobMoves:
    """Between-iteration moves of running jobs (mixed into `ClusterSimulator`)."""

    spec: ClusterSpec
    policy: SchedulerPolicy
    headroom: float
    trim_offer: Callable[[Group, str], tuple[int, ...]] | None  # the policy's, if it trims
    rehome: bool  # the policy offers every member a move, not only lone ones
    _book: GroupBook
    _jobs: dict[str, JobRuntime]
    _turns: NodeTurns
    _replanner: Replanner
    _room_at: dict[int, int]  # group: the count of room changes when it last gained room
    _room_changes: int  # room changes so far, of any group
    _moves: int
    _regroup_s: float
    _replan_s: float

    def _open(self, opened: list[Node], now: float) -> None:
        raise NotImplementedError

    def _release(self, released: list[Node], now: float) -> None:
        raise NotImplementedError

    def _join(self, rt: JobRuntime, order: float | None = None) -> None:
        raise NotImplementedError

    def _leave(self, job_id: str, now: float) -> None:
        raise NotImplementedError

    def _recount(self, group_id: int) -> None:
        raise NotImplementedError

    def _regroup(self, rt: JobRuntime, now: float) -> None:
        """Move a job to a group where it costs less (lone jobs; any job with `rehome`).

        RollMux places on arrival; jobs leave, and a member left alone on
        its training nodes keeps paying for them (and for any rollout node
        only it uses) as if it ran solo (or, with `rehome`, any member may
        have become its group's worst fit). Between two iterations (its
        nodes hold none of its phases) such a job is offered to the groups,
        with the same policy checks as an arrival, once groups opened or
        lost a member since it last looked. A move costs one cold start
        per phase on the new nodes (its state is not resident there yet),
        so none is offered that the job's SLO could not absorb
        (`replan.move_keeps_slo`; before, only re-plans' moves were held
        to it, and a 1.063-SLO job that moved with 35 iterations left on
        `sim scale --share-any` ended 0.3 % past its SLO).
        """
        group = self._book.groups[rt.group_id]
        key = (group.group_id, group.version)
        if rt.alone_key != key:  # whether it pays alone changes only with its group
            rt.alone_key = key
            rt.alone_on = paid_alone(group, rt.trace.profile.job_id, self.spec)
        alone_on = rt.alone_on
        lone = alone_on is not None
        rehome = self.rehome
        if not (lone or rehome):
            return
        own = tuple(group.pinning)
        if own == rt.content_with:
            return  # content: nothing pays for a move until its group changes
        if rt.tried_at == self._room_changes and own == rt.seen_with:
            return
        if not self._move_keeps_slo(rt, now):
            return
        since = rt.tried_at
        every = own != rt.seen_with  # what it adds where it is changed: all groups
        rt.tried_at, rt.seen_with = self._room_changes, own
        job = group.members[rt.trace.profile.job_id]  # its SLO target (banked slack)
        groups = self._open_groups()
        room_at = self._room_at
        fresh = [g for g in groups if room_at.get(g, -1) >= since]  # gained room since it looked
        if rehome:
            offered = groups if every else {g: groups[g] for g in fresh}
            offer = self.policy.move_offer(offered, group, job.job_id)
            placement = offer.placement
            if offer.content:
                rt.content_with = own
        else:  # the cheapest pinning in a group that changed, if cheaper than its own
            assert alone_on is not None  # without rehome only such jobs get here
            fresh_groups = {g: groups[g] for g in fresh if g != rt.group_id}
            placement = self.policy.place(fresh_groups, job) if fresh_groups else None
            if placement is not None and (
                placement.group_id is None or placement.extra_cost_per_hour >= alone_on
            ):
                placement = None
        if placement is None:
            return
        if len(group.members) > 1:
            self._gained_room(rt.group_id)  # the group it leaves gains room
        self._leave(job.job_id, now)
        group, opened = self._book.apply(placement, job)
        self._open(opened, now)
        rt.group_id = group.group_id
        rt.cold = {PhaseKind.ROLLOUT, PhaseKind.TRAIN}
        self._join(rt)
        self._recount(group.group_id)
        self._moves += 1

    def _gained_room(self, group_id: int) -> None:
        self._room_at[group_id] = self._room_changes
        self._room_changes += 1

    def _trim(self, rt: JobRuntime, now: float) -> None:
        """Move the job's rollouts to fewer or partners' nodes when that pays (`mux/trim.py`)."""
        seen = (rt.group_id, self._book.groups[rt.group_id].version)
        if self.trim_offer is None or rt.trimmed_with == seen:
            return
        rt.trimmed_with, job_id = seen, rt.trace.profile.job_id
        keep = self.trim_offer(self._book.groups[rt.group_id], job_id)
        if keep:
            was = set(self._book.groups[rt.group_id].pinning[job_id].rollout_nodes)
            if set(keep) - was:  # its last sync went to its old nodes: load them cold
                rt.cold.add(PhaseKind.ROLLOUT)
            self._turns.repin(job_id, was - set(keep), set(keep) - was)
            self._release(self._book.repin_rollout(job_id, keep), now)
            self._recount(rt.group_id)
            self._gained_room(rt.group_id)  # it has room for more now

    def _bank(self, rt: JobRuntime, now: float) -> None:
        """Re-target the job's SLO to the slowdown its whole run can still take (`mux/slack.py`).

        Outcomes are judged on the SLO it was submitted with (`rt.trace`).
        """
        job = rt.trace.profile
        target = remaining_slo(
            job.slo,
            job.planned_iter_s,
            now - rt.trace.arrival_s,
            rt.solo_done_s(),
            rt.trace.n_iters - rt.iters_done,
            self.headroom,
        )
        group = self._book.groups[rt.group_id]
        held = group.members[job.job_id].slo
        if abs(target - held) > float(getattr(self.policy, "bank_step", 0.0)) * held:
            budget = slo_budget(group)
            self._book.retarget_slo(job.job_id, target)
            if slo_budget(group) > budget:
                self._gained_room(rt.group_id)  # its tightest member eased: room for more

    def _open_groups(self) -> Mapping[int, Group]:
        """Groups that may take a job: not those a re-plan is still filling."""
        forming = self._replanner.forming()
        if not forming:
            return self._book.groups
        return {g: grp for g, grp in self._book.groups.items() if g not in forming}

    def _replan(self) -> None:
        t0 = wallclock.process_time()
        home = {j: rt.group_id for j, rt in self._jobs.items()}
        policy = self.policy  # RollMux: the only policy that re-plans
        self._replanner.plan(
            self._book.groups,
            home,
            policy.replan_plan,  # type: ignore[attr-defined]
            self.spec,
            self.headroom,
            self._turns.joins,
        )
        self._replan_s += wallclock.process_time() - t0

    def _move_keeps_slo(self, rt: JobRuntime, now: float) -> bool:
        left = rt.trace.n_iters - rt.iters_done
        elapsed = now - rt.trace.arrival_s
        done = rt.solo_done_s()
        return move_keeps_slo(rt.trace.profile, elapsed, done, left, self.spec, self.headroom)

    def _move_to(self, rt: JobRuntime, target: Target, now: float) -> None:
        """Move a job into its planned group (between its iterations), at a cold start per phase."""
        job = self._book.groups[rt.group_id].members[rt.trace.profile.job_id]
        placement, plan_nodes = self._replanner.placement(target, self._book.groups)
        if len(self._book.groups[rt.group_id].members) > 1:
            self._gained_room(rt.group_id)  # the group it leaves gains room
        self._leave(job.job_id, now)
        group, opened = self._book.apply(placement, job)
        self._replanner.moved(job.job_id, target, group, plan_nodes, [n.node_id for n in opened])
        self._open(opened, now)
        rt.group_id = group.group_id
        rt.cold = {PhaseKind.ROLLOUT, PhaseKind.TRAIN}
        self._join(rt, target.order)
        self._recount(group.group_id)
        self._moves += 1
