"""Tail batching (RollPacker, NSDI'26): synchronous rollout without waiting on the long tail.

Rounds replace steps of the plain buffer (alpha is 0: every round uses the
current weights only).
- Short round: ceil(eta * P0) prompts, each with ceil(eta * R0) responses.
  A prompt is done with its first R0 good responses; the round is done with
  its first P0 done prompts. Every other prompt of the round is aborted and
  queued as a long prompt: losing the race is the only length signal used.
- Long round: once P0 prompts are queued, exactly P0 of them run with R0
  responses each and no over-provisioning, and the round waits for all.
For agentic tasks a prompt is a task instance (task, seed) and a response is
one trajectory of it. The long queue is part of the checkpoint, and a long round
open at a checkpoint runs again on resume as that long round (its prompts, its fill).

Several tasks: the long queue holds the slow task's prompts, so a long round
would train on that task alone. One-task steps cost the other tasks what
they had learned: over six default runs (FrozenLake and guess-the-number),
guess's reward moved by -0.017 on average across a step pair holding a
FrozenLake-only long round, against +0.013 across a pair of short rounds.
So a long round also runs fresh prompts of each task the queue leaves short
of its weighted share of P0 (`fill_tasks`; `rollout.fill_long_rounds`, on by
default; each task at least one prompt). They are kept like the queued ones
(no over-provisioning). They are short, but they wait for a worker's
group slot: long rounds took 2.8 s instead of 2.4 s (about 3 % of a run).
One task alone: nothing to fill, the paper's round.

The paper over-provisions both by the same eta. Over responses, the race
keeps a group's *fastest* trajectories, and in multi-turn tasks speed is not
neutral: on FrozenLake, falling into a hole ends an episode in two turns
while reaching the goal takes four or more, so the race keeps the failures
and drops the successes, and a run collapses onto the fast failure (measured:
reward flat at the format-only 0.10 from step 12). `eta_responses` is
therefore its own knob; training defaults it to 1.0 (every response of a
kept prompt counts, the race is between prompts only, and a slow prompt is
deferred whole to a long round, never cut).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter, deque

from roll_agentic.rollout.buffer import DEFAULT_MAX_FAILING_S, TaskShare, TrajectoryBuffer
from roll_agentic.rollout.trajectory import Ticket, Trajectory

log = logging.getLogger(__name__)


class TailBatchingBuffer(TrajectoryBuffer):
    keeps_long_queue = True
    def __init__(self, tasks: list[TaskShare], groups_per_step: int, seed: int = 0, eta: float = 1.25,
                 eta_responses: float | None = None, fill_tasks: bool = True,
                 max_failing_s: float = DEFAULT_MAX_FAILING_S):
        super().__init__(tasks, groups_per_step, alpha=0, seed=seed, max_failing_s=max_failing_s)
        self.eta = eta
        self.eta_responses = eta if eta_responses is None else eta_responses
        self.fill_tasks = fill_tasks
        self._round_target = groups_per_step  # groups the running round keeps before it closes
        self.long_queue: deque[tuple[str, int]] = deque()
        self.round_id = -1
        self.round_kind = ""
        # The kind of the round last closed: metrics are read after the trainer has
        # advanced (and so started the next round), and describe the round it trained.
        self.closed_round_kind = ""
        self._round_tickets: deque[Ticket] = deque()
        # A long round's prompts, deferred (from the long queue) and fill: a checkpoint
        # saves them as such, so a resume runs them as that long round again.
        self._round_prompts: list[tuple[str, int]] = []
        self._round_fill: list[tuple[str, int]] = []
        self._round_groups: set[str] = set()
        # Prompts the running short round took from `_requeued` (a resume's, a long round's
        # spare fill): unlike fresh ones they were drawn before, and nothing draws them again.
        self._round_carried: set[tuple[str, int]] = set()
        self._round_done = 0
        self._closed: dict[int, asyncio.Event] = {}
        self._done_groups: set[str] = set()
        self.tail = {"rounds_short": 0, "rounds_long": 0, "aborted_prompts": 0, "aborted_responses": 0,
                     "extra_responses": 0, "fill_prompts": 0}
        self._start_round()

    # -- rounds -----------------------------------------------------------------------------
    def _start_round(self, fill: list[tuple[str, int]] | None = None,
                     spare: list[tuple[str, int]] | None = None) -> None:
        """Opens the next round; `fill`: a resumed long round's fill prompts (drawn before).
        `spare`: fill prompts of a resumed long round sized for another P0; a long round takes
        its fill from them first, and the rest (all, in a short round) are requeued. They were
        drawn, maybe run, never trained: dropping them lost them (nothing re-draws them)."""
        spare = [] if spare is None else spare
        p0 = self.groups_per_step
        self._done_groups.clear()
        self.round_id += 1
        self._round_done = 0
        self._round_groups = set()
        self._round_carried = set()
        self._closed[self.round_id] = asyncio.Event()
        self._round_target = p0
        if len(self.long_queue) >= p0:
            self.round_kind = "long"
            self.tail["rounds_long"] += 1
            prompts = [self.long_queue.popleft() for _ in range(p0)]
            if fill is None:
                fill = self._fill_prompts(Counter(task for task, _ in prompts), spare) if self.fill_tasks else []
            self._requeue(spare)
            self._round_prompts, self._round_fill = prompts, fill
            self._round_target = p0 + len(fill)
            for task, seed in prompts + fill:
                r0 = self._group_size[task]
                self._round_tickets.append(Ticket("", task, seed, r0, self.state.version, r0, self.round_id))
        else:
            self.round_kind = "short"
            self.tail["rounds_short"] += 1
            self._round_prompts, self._round_fill = [], []
            # A resumed long round that cannot run here: its fill prompts race in this round.
            self._requeue((fill or []) + spare)
            for _ in range(math.ceil(self.eta * p0)):
                if self._requeued:  # prompts of a round cut short by a resume come first
                    t = self._requeued.popleft()
                    task, seed = t.task, t.seed
                    self._round_carried.add((task, seed))
                else:
                    task, seed = self._pick_task().name, self.rng.randrange(2**31)
                r0 = self._group_size[task]
                self._round_tickets.append(Ticket("", task, seed, math.ceil(self.eta_responses * r0), self.state.version,
                                                  r0, self.round_id))

    def _fill_prompts(self, queued: Counter, spare: list[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
        """Prompts that bring each task up to its weighted share of P0 (at least one): those of
        `spare` first (taken out of it), then fresh ones."""
        total = sum(t.weight for t in self.tasks)
        pool = [] if spare is None else spare
        fill: list[tuple[str, int]] = []
        for t in self.tasks:
            share = max(1, round(self.groups_per_step * t.weight / total))
            need = max(0, share - queued[t.name])
            reused = [p for p in pool if p[0] == t.name][:need]
            for p in reused:
                pool.remove(p)
            fill += reused + [(t.name, self.rng.randrange(2**31)) for _ in range(need - len(reused))]
        return fill

    def _requeue(self, prompts: list[tuple[str, int]], front: bool = False) -> None:
        """Prompts a short round issues before fresh ones (after those already requeued; `front`:
        before them, in this order); as in the plain buffer's resume, one of a task no longer
        configured has no worker to run it."""
        tickets = [Ticket("", task, seed, self._group_size[task], self.state.version)
                   for task, seed in prompts if task in self._group_size]
        if front:
            self._requeued.extendleft(reversed(tickets))
        else:
            self._requeued.extend(tickets)

    def _close_round(self) -> None:
        for gid in list(self._round_groups):  # still running: abort and queue as long prompts
            ticket = self._tickets.pop(gid)
            self._open.pop(gid, None)
            self._outstanding -= 1
            self.long_queue.append((ticket.task, ticket.seed))
            self.tail["aborted_prompts"] += 1
        self._round_groups.clear()
        # Carried prompts no worker took before the round closed go back to the head of the
        # queue (the next short round issues them first); clearing them lost them for good.
        self._requeue([(t.task, t.seed) for t in self._round_tickets if (t.task, t.seed) in self._round_carried],
                      front=True)
        self._round_tickets.clear()
        self.closed_round_kind = self.round_kind
        self.tail["fill_prompts"] += self._round_target - self.groups_per_step  # counted once trained
        self._closed[self.round_id].set()

    async def wait_round_closed(self, round_id: int) -> None:
        event = self._closed.get(round_id)
        if event is not None:
            await event.wait()

    # -- overrides of the plain buffer ---------------------------------------------------------
    def _can_issue(self) -> bool:
        return bool(self._round_tickets)

    def _issue(self) -> Ticket:
        t = self._round_tickets.popleft()
        ticket = Ticket(f"g{self.state.next_group}", t.task, t.seed, t.group_size, self.state.version,
                        t.keep, t.round_id)
        self._register(ticket)
        self._round_groups.add(ticket.group_id)
        return ticket

    def _accept(self, traj: Trajectory) -> None:
        self.counters.trajectories_received += 1
        members = self._open.get(traj.group_id)
        if members is None:  # its prompt already finished, or was aborted with its round
            self.tail["extra_responses" if traj.group_id in self._done_groups else "aborted_responses"] += 1
            self.counters.trajectories_dropped += 1
            return
        ticket = self._tickets[traj.group_id]
        ok = [t for t in members if t.status == "ok"]
        if traj.status == "ok" and traj.min_version < ticket.issued_version:
            # Sampled, at least in part, with weights older than its round's (an engine that
            # missed a weight sync): alpha is 0 here, so it is stale, never trained as fresh.
            traj.status = "stale"
            traj.error = f"turns on weights v{traj.min_version} in a round of v{ticket.issued_version}"
        if traj.status != "ok":
            self._failed(traj)
            self.counters.trajectories_dropped += 1
            return
        if len(ok) >= ticket.keep:  # a response that lost the race within its prompt
            self.tail["extra_responses"] += 1
            self.counters.trajectories_dropped += 1
            return
        members.append(traj)
        if len(members) < ticket.keep:
            return
        self.retries.succeeded(ticket.task, ticket.seed)
        del self._open[traj.group_id]
        del self._tickets[traj.group_id]
        self._round_groups.discard(traj.group_id)
        self._outstanding -= 1
        self._ready.append(members)
        self._done_groups.add(traj.group_id)
        self._group_completed()
        self._round_done += 1
        if self._round_done >= self._round_target:
            self._close_round()

    async def put_many(self, trajs: list[Trajectory]) -> None:
        """A worker hands in each group once: its first good episodes, or all it got."""
        async with self._cond:
            for traj in trajs:
                self._accept(traj)
            for gid in {t.group_id for t in trajs}:
                if gid in self._open:  # came back without enough good episodes: roll it again
                    ticket = self._tickets.pop(gid)
                    del self._open[gid]
                    self._round_groups.discard(gid)
                    self._outstanding -= 1
                    members = [t for t in trajs if t.group_id == gid]
                    self._group_failed(members)
                    seed = ticket.seed
                    if self.retries.replace(ticket.task, ticket.seed, members):
                        # It fails for good (its prompt never fits, the task's code fails on
                        # it) or too often: rolled again, its round never closed. A fresh
                        # prompt of the task takes its place, as in the plain buffer.
                        seed = self._replace_prompt(ticket.task, ticket.seed)
                        self.counters.prompts_replaced += 1
                    self._round_tickets.append(Ticket("", ticket.task, seed, ticket.group_size,
                                                      ticket.issued_version, ticket.keep, ticket.round_id))
            self._cond.notify_all()

    def _replace_prompt(self, task: str, seed: int) -> int:
        """A fresh seed of `task` for a prompt that cannot run; a long round's own list
        (saved by a checkpoint) names the new prompt instead of the old."""
        new = self.rng.randrange(2**31)
        for prompts in (self._round_prompts, self._round_fill):
            if (task, seed) in prompts:
                prompts[prompts.index((task, seed))] = (task, new)
                break
        return new

    async def get_batch(self, num_groups: int, version: int) -> list[list[Trajectory]]:
        """The round's groups: `num_groups` (P0), or more when a long round was filled."""
        async with self._cond:
            num_groups = max(num_groups, self._round_target)
            while not (self._stopped or len(self._ready) >= num_groups):
                self._raise_if_failing()  # every group failing would otherwise wait for ever
                await self._cond.wait()
            batch = [self._ready.popleft() for _ in range(min(num_groups, len(self._ready)))]
            self.counters.trajectories_trained += sum(len(g) for g in batch)
            self._taken += batch
            return batch

    async def take_ready(self, version: int) -> tuple[list[list[Trajectory]], bool]:
        """Streaming: the groups completed so far (waits for at least one new one)."""
        async with self._cond:
            while not (self._stopped or self._ready):
                self._raise_if_failing()
                await self._cond.wait()
            batch = list(self._ready)
            self._ready.clear()
            self.counters.trajectories_trained += sum(len(g) for g in batch)
            self._taken += batch
            return batch, self._closed[self.round_id].is_set()

    async def advance(self, version: int) -> None:
        async with self._cond:
            self.state.version = version
            self.state.steps_taken += 1
            self._taken.clear()  # trained
            self._start_round()
            self._cond.notify_all()

    def export_state(self, untrained: bool = False) -> dict:
        state = super().export_state(untrained)
        if self.round_kind == "long":
            # Its prompts go back to the head of the long queue, not to `requeued`: a resume
            # raced them again in a short round, cut off as before and re-deferred, when they
            # had been deferred to this round (run without a cut-off). Every issued, open,
            # ready or (`untrained`) taken group of the running round is one of them; only
            # `_requeued` is not.
            state["requeued"] = [{"task": t.task, "seed": t.seed, "group_size": t.group_size}
                                 for t in self._requeued]
            queue = self._round_prompts + list(self.long_queue)
            state["round_fill"] = [list(x) for x in self._round_fill]
        else:
            # Prompts of the running short round (issued or not) are re-issued first on resume.
            state["requeued"] += [{"task": t.task, "seed": t.seed, "group_size": self._group_size[t.task]}
                                  for t in self._round_tickets]
            queue = list(self.long_queue)
        state["long_queue"] = [list(x) for x in queue]
        state["tail"], state["round_kind"] = dict(self.tail), self.round_kind
        if untrained and self._closed[self.round_id].is_set():
            # The round closed but was not trained: it runs again on resume and counts its
            # fill prompts again when it closes again.
            state["tail"]["fill_prompts"] -= self._round_target - self.groups_per_step
        state["groups_per_step"] = self.groups_per_step  # the size the saved round was built for
        return state

    def import_state(self, state: dict) -> None:
        super().import_state(state)
        # As the plain buffer's requeue does: a task no longer configured has no worker to play it.
        self.long_queue = deque(tuple(x) for x in state.get("long_queue", []) if x[0] in self._group_size)
        self._round_tickets.clear()  # the round built at construction is replaced
        kind = self.round_kind  # that round's, counted at construction
        if "tail" in state:  # the run's totals, the round in progress at the checkpoint included
            self.tail.update(state["tail"])
            kind = state["round_kind"]
        self.tail["rounds_short" if kind == "short" else "rounds_long"] -= 1  # it starts again below
        self.round_id -= 1
        fill, spare = None, None
        saved_p0 = state.get("groups_per_step", self.groups_per_step)  # older checkpoints: unknown
        if kind == "long" and "round_fill" in state:  # the same long round: its prompts head the queue
            fill = [(task, seed) for task, seed in state["round_fill"] if task in self._group_size]
            if not self.fill_tasks:  # fill turned off: its saved prompts race in short rounds instead
                fill, spare = [], fill
            elif saved_p0 != self.groups_per_step and fill:
                # Sized for the old P0, the round cannot run as saved: the new round takes P0
                # prompts off the queue's head, and its fill comes from the saved fill first;
                # what it leaves (all of it, when the queue is now too short for a long round)
                # is requeued, so each saved fill prompt is still issued once.
                fill, spare = None, fill
        self._start_round(fill, spare)
        if saved_p0 != self.groups_per_step:
            saved_fill = [(task, seed) for task, seed in state.get("round_fill", []) if task in self._group_size]
            self._say_round_size_changed(saved_p0, kind, saved_fill)

    def _say_round_size_changed(self, saved_p0: int, saved_kind: str, saved_fill: list[tuple[str, int]]) -> None:
        """One line: a resume at another round size changes which prompts the next rounds run."""
        msg = (f"tail batching resumed with groups_per_step={self.groups_per_step} (the checkpoint's "
               f"was {saved_p0}): rounds now keep {self.groups_per_step} prompts; the saved {saved_kind} "
               f"round restarts as a {self.round_kind} round")
        if saved_kind == "long" and saved_fill and self.fill_tasks:
            reused = sum(p in saved_fill for p in self._round_fill)
            msg += (f"; of its {len(saved_fill)} fill prompts, {reused} fill this round and "
                    f"{len(saved_fill) - reused} are requeued (short rounds issue them before fresh prompts)")
        log.warning(msg + f"; {len(self.long_queue)} deferred prompts wait in the long queue")

    def metrics(self) -> dict[str, float]:
        m = super().metrics()
        m.update({f"tail/{k}": float(v) for k, v in self.tail.items()})
        m["tail/long_queue"] = float(len(self.long_queue))
        m["tail/round_is_long"] = float(self.closed_round_kind == "long")
        return m
