"""Discrete-event simulator of a disaggregated cluster running many RL jobs.

What it models (and what it does not):
- Nodes are rented elastically: a node costs its class's $/h from the
  moment a placement opens it until the last job pinned to it leaves. Cost
  is node-hours x price, summed over the run; nothing is hard-coded.
- Jobs arrive per the trace, are placed once by the policy under test, loop
  rollout -> train -> sync for `n_iters` iterations, and leave. Jobs that
  arrive at the same instant go to the policy's `place_batch` together
  when it has one (RollMux: `mux/batch.py`).
- Which phase a job queues next comes from the policy's `next_phases`
  (rollout -> train -> sync for all shipped policies); each node serves its
  jobs in turns, like the plans (`turns`): a phase starts when its job
  holds the turn on every node it needs and they are free, so a short job
  never laps a long one.
- Real phase lengths are the worst-case profile times the job's
  per-iteration factors (distributions in `trace`: long-tailed rollout,
  training that scales with generated tokens). Factors come from the
  job's own seed, so all policies see the same work.
- Long-tail migration (when `spec.migration`): a rollout hands its nodes
  to the next rollout queued on them after `JobProfile.tail_hold` of its
  length (its stragglers keep a few GPUs, counted pro rata: a fluid
  model, `mux/migration.py`); the job's training still waits for its
  last response. Busy GPU time counts the held share only.
- A node that starts a phase of another job or kind than its previous one
  pays a warm switch if its resident states fit its host memory, else a
  cold one. Sync holds no GPU (weights go through host memory).
- SLO: a job attains it if its time from arrival to the end of its last
  completed iteration is <= SLO x the sum of the same iterations run alone
  (solo: dedicated nodes, no switches). No queueing for capacity: the
  cloud always has another node.
- A policy with `regroup` set may move a job left alone in its group to
  another group between two iterations; the move pays a cold start on
  each of its first phases there; RollMux may also trim its rollout nodes.
  One with `replan_every_h` re-places its least-saving groups' jobs the same way.
  One with `bank_slack` has a job's SLO target re-set, at the iteration
  ends where it is looked at (`_screen`), to what its whole run can still
  take (`mux/slack.py`). These
  between-iteration changes are in `moves.py`.
- Every change of a group's members or nodes is booked (`census.py`):
  what each run spent per group size and, on jobs alone in their group,
  per SLO band.
- Not modelled: node failures, network contention between jobs' syncs, partial-node
  allocations, the cold load of a job's very first phase (identical across policies).
"""

from __future__ import annotations

import time as wallclock
from collections.abc import Iterable, Mapping, Sequence

from roll_agentic.mux.batch import ScratchIds
from roll_agentic.mux.group import Group, GroupBook, Node, Placement
from roll_agentic.mux.policy import SchedulerPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, PhaseKind, Pool
from roll_agentic.mux.round_robin import PhaseSpec
from roll_agentic.sim.census import GroupCensus
from roll_agentic.sim.events import EventQueue, EventType
from roll_agentic.sim.job_runtime import JobRuntime, NodeRuntime
from roll_agentic.sim.moves import JobMoves
from roll_agentic.sim.replan import Replanner
from roll_agentic.sim.sim_result import Allocation, JobOutcome, PhaseRecord, SimResult
from roll_agentic.sim.trace import TraceJob, iteration_factors
from roll_agentic.sim.turns import NodeTurns


class ClusterSimulator(JobMoves):
    def __init__(
        self,
        spec: ClusterSpec,
        policy: SchedulerPolicy,
        record_phases: bool = False,
        horizon_s: float | None = None,
    ) -> None:
        # Policies that move jobs left alone in a group say so (RollMux does).
        self.regroup = bool(getattr(policy, "regroup", False))
        self.rehome = bool(getattr(policy, "rehome", False))
        # And those that re-place running jobs every so often (`replan.py`), or trim rollout nodes.
        self.replan_every_s = float(getattr(policy, "replan_every_h", 0.0)) * 3600.0
        self.trim_offer = getattr(policy, "trim_offer", None)
        # And those that know a job no group could take (`_stays_alone`).
        self.shares_nothing = getattr(policy, "shares_nothing", None)
        # And those that hold running jobs to their whole run's SLO (`mux/slack.py`).
        self.bank_slack = bool(getattr(policy, "bank_slack", False))
        # Moving members look only when something changed (`_rest`); with a
        # target that moves as it runs, or re-plans to follow, at every iteration end.
        self._rests_on_screen = self.rehome and not self.bank_slack and self.replan_every_s <= 0
        # The share of an SLO the policy keeps back; moves and banked targets keep it too.
        self.headroom = float(getattr(policy, "headroom", 0.0))
        self.spec = spec
        self.policy = policy
        self.record_phases = record_phases
        self.horizon_s = horizon_s

    @property
    def groups(self) -> Mapping[int, Group]:
        """The groups the last run held when it ended (at its horizon, if it had one)."""
        return self._book.groups

    def run(self, trace_jobs: Sequence[TraceJob]) -> SimResult:
        self._book = GroupBook(self.spec)
        self._book.touched = set()
        # Jobs to look at when their iteration ends: members of groups that
        # changed since, and jobs alone in their group (`_screen`).
        self._watch: set[str] = set()
        # Jobs alone in their group, each with the count of room changes
        # when it last looked: a move can pay only once a group gained room.
        self._lone: dict[str, int] = {}
        self._events = EventQueue()
        self._nodes: dict[int, NodeRuntime] = {}
        self._jobs: dict[str, JobRuntime] = {}
        self._allocs: dict[int, Allocation] = {}
        self._done_allocs: list[Allocation] = []
        self._outcomes: list[JobOutcome] = []
        self._busy = {p.value: 0.0 for p in Pool}
        self._phases: list[PhaseRecord] = []
        self._sched_s = 0.0
        self._regroup_s = 0.0
        # Groups that gained room (opened, or a member left), counted in
        # order: when each last did, and how many times any did.
        self._room_at: dict[int, int] = {}
        self._room_changes = 0
        self._moves = 0
        self._turns = NodeTurns()
        self._replanner = Replanner.of(self.policy)
        self._replan_s = 0.0
        self._census = GroupCensus(self.spec)
        self._recounts: set[int] = set()  # groups changed by the event at hand (`_recount`)
        by_id = {j.profile.job_id: j for j in trace_jobs}
        last_arrival = max((j.arrival_s for j in trace_jobs), default=0.0)
        if self.replan_every_s > 0 and trace_jobs:
            first = min(j.arrival_s for j in trace_jobs)
            self._events.push(first + self.replan_every_s, EventType.REPLAN, "")
        for j in trace_jobs:
            self._events.push(j.arrival_s, EventType.ARRIVE, j.profile.job_id)
        now = 0.0
        while self._events:
            if self.horizon_s is not None and self._events.peek_time() > self.horizon_s:
                break
            ev = self._events.pop()
            now = ev.time
            if ev.type is EventType.ARRIVE:
                batch = [by_id[ev.job_id]]
                while self._events and self._events.peek().type is EventType.ARRIVE and (
                    self._events.peek_time() == now
                ):
                    batch.append(by_id[self._events.pop().job_id])
                self._arrive(batch, now)
            elif ev.type is EventType.SYNC_END:
                self._job_iteration_end(ev.job_id, now)
            elif ev.type is EventType.REPLAN:
                self._replan()
                if self._jobs or now < last_arrival:
                    self._events.push(now + self.replan_every_s, EventType.REPLAN, "")
            elif ev.type is EventType.RELEASE:
                self._free_nodes(ev.job_id, PhaseKind.ROLLOUT, now)
            else:
                assert ev.kind is not None
                self._phase_end(ev.job_id, ev.kind, now)
            if self._recounts:
                self._book_census(now)
        end = self.horizon_s if self.horizon_s is not None else now
        for a in self._allocs.values():
            a.closed = end
            self._done_allocs.append(a)
        for rt in self._jobs.values():  # still running at the horizon
            self._outcomes.append(self._outcome(rt))
        self._census.close(end)
        return SimResult(
            self.policy.name,
            self._done_allocs,
            self._outcomes,
            self._busy,
            self._sched_s,
            end,
            self._phases,
            self._regroup_s,
            self._moves,
            self._replan_s,
            self._replanner.replans,
            self._census.by_size,
            self._census.alone_by_slo,
        )

    # -- events ---------------------------------------------------------------

    def _arrive(self, jobs: list[TraceJob], now: float) -> None:
        """Place jobs that arrive at `now`: together when the policy can (a sweep)."""
        batch = getattr(self.policy, "place_batch", None)
        if len(jobs) > 1 and batch is not None:
            t0 = wallclock.process_time()  # CPU time: robust to a busy machine
            steps = batch(self._open_groups(), [j.profile for j in jobs])
            self._sched_s += wallclock.process_time() - t0
            by_id = {j.profile.job_id: j for j in jobs}
            ids = ScratchIds()
            for step in steps:  # each joins before the next is pinned (node turns)
                group, opened = ids.apply(self._book, step)
                self._admit(by_id[step.job.job_id], step.placement, group, opened, now)
            return
        for job in jobs:
            t0 = wallclock.process_time()
            placement = self.policy.place(self._open_groups(), job.profile)
            self._sched_s += wallclock.process_time() - t0
            group, opened = self._book.apply(placement, job.profile)
            self._admit(job, placement, group, opened, now)

    def _admit(
        self, job: TraceJob, placement: Placement, group: Group, opened: list[Node], now: float
    ) -> None:
        if placement.group_id is None:
            self._gained_room(group.group_id)
        self._open(opened, now)
        roll_f, train_f = iteration_factors(job.seed, job.n_iters)
        rt = JobRuntime(job, roll_f, train_f, group.group_id, last_end=job.arrival_s)
        self._jobs[job.profile.job_id] = rt
        self._join(rt)
        self._recount(group.group_id)
        self._enqueue(job.profile.job_id, None, now)

    def _phase_end(self, job_id: str, kind: PhaseKind, now: float) -> None:
        rt = self._jobs[job_id]
        if kind is PhaseKind.ROLLOUT and rt.handed_on:  # its nodes serve another job now
            rt.handed_on = False
            self._enqueue(job_id, kind, now)
            return
        freed = self._free_nodes(job_id, kind, None)
        self._enqueue(job_id, kind, now)
        self._kick(freed, now)

    def _free_nodes(self, job_id: str, kind: PhaseKind, kick_at: float | None) -> tuple[int, ...]:
        """Mark the nodes of a job's phase free; start what waits on them if `kick_at`."""
        rt = self._jobs[job_id]
        pin = self._book.groups[rt.group_id].pinning[job_id]
        freed = pin.nodes_for(Pool.ROLLOUT) if kind is PhaseKind.ROLLOUT else pin.train_nodes
        for nid in freed:
            self._nodes[nid].busy = False
        if kick_at is not None:
            self._kick(freed, kick_at)
        return freed

    def _job_iteration_end(self, job_id: str, now: float) -> None:
        rt = self._jobs[job_id]
        rt.iters_done += 1
        rt.last_end = now
        self._turns.iteration_done(job_id)
        if rt.iters_done < rt.trace.n_iters:
            if not self._screen(job_id):
                self._enqueue(job_id, PhaseKind.SYNC, now)
                return
            # Everything decided between two iterations is scheduler work,
            # the checks that find nothing to do included.
            t0 = wallclock.process_time()
            if self.bank_slack:
                self._bank(rt, now)
            # Its nodes are idle: a move is safe now.
            target = self._replanner.take(job_id)
            if target is not None:
                if self._move_keeps_slo(rt, now):
                    self._move_to(rt, target, now)
            elif self.regroup and rt.group_id not in self._replanner.forming():
                self._regroup(rt, now)
            if target is None and rt.group_id not in self._replanner.forming():
                self._trim(rt, now)
            if self._rests_on_screen or (rt.alone_on is not None and not self._stays_alone(rt)):
                self._rest(rt)
            self._regroup_s += wallclock.process_time() - t0
            self._enqueue(job_id, PhaseKind.SYNC, now)
            return
        self._outcomes.append(self._outcome(rt))
        self._leave(job_id, now)
        del self._jobs[job_id]
        self._lone.pop(job_id, None)
        self._gained_room(rt.group_id)

    def _screen(self, job_id: str) -> bool:
        """Should anything be decided for this job at its iteration end?

        Only for a member of a group that changed since its last look (it
        may be alone now, or trim its rollout nodes), a job alone in its
        group once some group gained room since its last search (a move may
        pay then; at every iteration end with `bank_slack`, whose target
        moves as it runs, or while its last look could not search), or any
        job when the policy moves any member (`rehome`) or a re-plan has
        moves pending. At 2,000 jobs that skips ~95 % of ~290,000 iteration
        ends with a lookup or two; what is decided for the rest is timed,
        the checks that find nothing to do included. With `bank_slack` the
        jobs looked at have their SLO targets re-taken (`_bank`); the others
        keep theirs, which is safe: a job that runs at its planned pace
        never needs a lower target (`mux/slack.py`).
        """
        touched = self._book.touched
        if touched:
            t0 = wallclock.process_time()
            groups = self._book.groups
            for gid in touched:
                if gid in groups:
                    self._watch.update(groups[gid].members)
            touched.clear()
            self._regroup_s += wallclock.process_time() - t0
        if job_id in self._watch:
            self._watch.discard(job_id)
            self._lone.pop(job_id, None)
            return True
        if self._lone.get(job_id, self._room_changes) != self._room_changes:
            del self._lone[job_id]
            return True
        return (self.rehome and not self._rests_on_screen) or bool(self._replanner.targets)

    def _rest(self, rt: JobRuntime) -> None:
        """Until what a job that may move (alone in its group, or any with
        `rehome`) needs no look at its iteration ends.

        Its look (`_regroup`) finds nothing to do while it is content with
        its group's members, or while no group gained room since it last
        tried and its group's members are the ones it tried with; a change
        of its own group puts it on `_watch` (`_screen`). So it is woken by
        that change alone when content, by a room change too when not, and
        looked at next time otherwise (its last look was held back: a move
        would not have kept its SLO; or with `bank_slack`, its target
        moves). The same looks as at every iteration end: on 2,000 jobs with
        `rehome`, 32,737 instead of 293,076.
        """
        own = tuple(self._book.groups[rt.group_id].pinning)
        job_id = rt.trace.profile.job_id
        if own == rt.content_with:
            return
        if not self.bank_slack and rt.tried_at == self._room_changes and own == rt.seen_with:
            self._lone[job_id] = self._room_changes
        else:
            self._watch.add(job_id)

    def _stays_alone(self, rt: JobRuntime) -> bool:
        """No group could take this job, however the groups change (its SLO target is too tight)."""
        if self.shares_nothing is None or rt.group_id not in self._book.groups:
            return False
        return bool(self.shares_nothing(self._book.groups[rt.group_id].members[rt.trace.profile.job_id]))

    def _open(self, opened: list[Node], now: float) -> None:
        for node in opened:
            if self.spec.rollout_fifo and node.pool is Pool.ROLLOUT:
                self._turns.fifo.add(node.node_id)
            self._nodes[node.node_id] = NodeRuntime(node)
            self._allocs[node.node_id] = Allocation(
                node.node_id, node.pool.value, self.spec.price(node.pool), now
            )

    def _release(self, released: list[Node], now: float) -> None:
        for node in released:
            alloc = self._allocs.pop(node.node_id)
            alloc.closed = now
            self._done_allocs.append(alloc)
            del self._nodes[node.node_id]
            self._turns.fifo.discard(node.node_id)

    # -- turns ----------------------------------------------------------------

    def _join(self, rt: JobRuntime, order: float | None = None) -> None:
        job_id = rt.trace.profile.job_id
        group = self._book.groups[rt.group_id]
        pin = group.pinning[job_id]
        partners = [j for j in group.members if j != job_id]
        self._turns.join(job_id, pin.nodes_for(Pool.ROLLOUT) + pin.train_nodes, partners, order)

    def _leave(self, job_id: str, now: float) -> None:
        """Unpin a job; its turns pass to the partners it leaves behind."""
        nids = self._turns.leave(job_id)
        self._replanner.left(job_id)
        group_id = self._book.job_group[job_id]
        self._release(self._book.remove(job_id), now)
        self._recount(group_id)
        self._kick([n for n in nids if n in self._nodes], now)

    def _recount(self, group_id: int) -> None:
        """The group's members or nodes changed: its cost up to now is booked once the
        event is handled (`_book_census`), outside the scheduler's timed decisions."""
        self._recounts.add(group_id)

    def _book_census(self, now: float) -> None:
        def slo_of(job_id: str) -> float:
            return self._jobs[job_id].trace.profile.slo  # as submitted, not a banked target

        for group_id in self._recounts:
            self._census.update(group_id, self._book.groups.get(group_id), now, slo_of)
        self._recounts.clear()

    def _kick(self, node_ids: Iterable[int], now: float) -> None:
        """Start what waits on free nodes for the job that holds their turn."""
        for nid in node_ids:
            turn = self._turns.turn(nid)
            if self._nodes[nid].busy or turn is None:
                continue
            ph = self._jobs[turn].pending
            if ph is not None and nid in ph.nodes:
                self._try_start(ph, now)

    # -- phases ---------------------------------------------------------------

    def _enqueue(self, job_id: str, finished: PhaseKind | None, now: float) -> None:
        group = self._book.groups[self._jobs[job_id].group_id]
        for ph in self.policy.next_phases(group, job_id, finished):
            if ph.kind is PhaseKind.SYNC:
                sync_s = group.times(job_id, self.spec).sync_s
                self._events.push(now + sync_s, EventType.SYNC_END, job_id)
                continue
            self._jobs[job_id].pending = ph
            if ph.kind is PhaseKind.ROLLOUT and self.spec.rollout_fifo:
                self._turns.queue_rollout(job_id)
            self._try_start(ph, now)

    def _try_start(self, ph: PhaseSpec, now: float) -> None:
        nodes = [self._nodes[nid] for nid in ph.nodes]
        if any(n.busy for n in nodes) or not self._turns.holds_turn(ph.job_id, ph.nodes):
            return
        rt = self._jobs[ph.job_id]
        rt.pending = None
        self._turns.started(ph.job_id, ph.nodes)
        switch = 0.0
        for n in nodes:
            n.busy = True
            if n.last != (ph.job_id, ph.kind):
                resident = n.node.mem_used_gb <= n.node.mem_capacity_gb
                warm = self.spec.warm_switch_s if resident else self.spec.cold_switch_s
                switch = max(switch, warm if n.last is not None else 0.0)
            n.last = (ph.job_id, ph.kind)
        if ph.kind in rt.cold:
            rt.cold.discard(ph.kind)
            switch = self.spec.cold_switch_s
        times = self._book.groups[rt.group_id].times(ph.job_id, self.spec)
        i = rt.iters_done
        if ph.kind is PhaseKind.ROLLOUT:
            dur = times.roll_s * float(rt.roll_f[i])
            # Migration: the tail's share of this phase's own length.
            held = now + switch + dur
            if times.roll_hold_s is not None:
                held = now + switch + dur * times.roll_hold_s / times.roll_s
        else:
            dur = times.train_s * float(rt.train_f[i])
            held = now + switch + dur
        end = now + switch + dur
        rt.handed_on = held < end
        for n in nodes:
            self._busy[n.node.pool.value] += (held - now) * self.spec.node_class(
                n.node.pool
            ).gpus_per_node
            if self.record_phases:
                self._phases.append(
                    PhaseRecord(
                        n.node.node_id, n.node.pool.value, ph.job_id, ph.kind.value, now, held
                    )
                )
        if rt.handed_on:
            self._events.push(held, EventType.RELEASE, ph.job_id, ph.kind)
        self._events.push(end, EventType.PHASE_END, ph.job_id, ph.kind)

    def _outcome(self, rt: JobRuntime) -> JobOutcome:
        p: JobProfile = rt.trace.profile
        return JobOutcome(
            p.job_id,
            rt.trace.arrival_s,
            rt.last_end,
            rt.iters_done,
            rt.trace.n_iters,
            rt.solo_done_s(),
            p.slo,
        )
