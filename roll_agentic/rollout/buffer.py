"""Tickets out, finished trajectories in, GRPO groups out: the trajectory buffer.

Workers ask for a ticket (a task and seed to roll out as one group) and hand
back finished trajectories one by one; the trainer takes whole groups. The
staleness bound alpha lives here twice: tickets are only issued up to alpha
steps ahead of the trainer, and a group holding a trajectory begun more than
alpha weight versions before the step that would train on it is dropped and
its ticket re-issued. alpha = 0 is therefore synchronous on-policy training.

With `prepare_ahead`, once the bound lets no more groups start and the open
groups are done, the next step's tickets are still handed out, marked
`opens_at_step`: a worker resets their environments and builds their first
prompts while the trainer trains, and sends the requests the moment the step
opens (`wait_step`). No token is generated before its step, so the bound
holds; what moves out of the step is env start-up. Measured in `bench engine`
(2 cores): a new step's requests reached the engine over 40-60 ms after it
opened, and now within 5-28 ms; a slow `reset` (a container, a simulator)
would otherwise stretch that to its own duration.

With `drop_no_signal` (DAPO's dynamic sampling, Yu et al. 2025), a group
whose rewards are all equal (GRPO advantage 0: it teaches nothing) is
dropped and its place given to a fresh prompt, so a step trains on groups
that carry a gradient. At most `NO_SIGNAL_OVERSAMPLE` x groups_per_step are
dropped per step; past that the step takes such groups as they come, so a
task where every group fails alike slows a step by that factor at most and
never stalls the run.

A run whose every group fails stops, naming the cause (`_raise_if_failing`).
A failure that may pass (an engine or the reward emulator restarting, a
connection refused, a time-out) gets `rollout.max_failing_s` (300 s) with no
group succeeding first: a restart is not a broken system. A failure of the
user's own code (a reward function or env that raises, an env that breaks
its contract, a prompt that cannot fit; `Trajectory.deterministic`,
roll_agentic/failures.py) recurs on every re-roll, so `max_failed_in_a_row`
groups in a row failing only so, with not one episode succeeding among
them, stop the run at once: that took 5 minutes of a silent-looking run
before, for a bug the first failed episode already named.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from roll_agentic.rollout.prompt_retries import PromptRetries
from roll_agentic.rollout.step_mix import StepMix
from roll_agentic.rollout.trajectory import Ticket, Trajectory

# With drop_no_signal: groups of equal rewards dropped per step, as a multiple of groups_per_step.
NO_SIGNAL_OVERSAMPLE = 3
# How long every group may fail, for causes that may pass, before the run stops (rollout.max_failing_s).
DEFAULT_MAX_FAILING_S = 300.0


class RolloutFailing(RuntimeError):
    """Every group fails: the run stops, the message says why and what to check."""


@dataclass
class TaskShare:
    name: str
    weight: float
    group_size: int
    # What the task runs, for the message of a run stopped by its failures (what to check)
    env_id: str = ""
    env_kwargs: dict = field(default_factory=dict)
    reward: str = ""  # its `reward` module, as the task names it
    reward_function: str = ""  # the Lambda function it is deployed as (reward.mode=serverless), else ""
    reward_state_dir: str = ""  # the run's own emulator's state dir (its function logs), else ""


@dataclass
class BufferCounters:
    tickets_issued: int = 0
    groups_completed: int = 0
    groups_dropped_stale: int = 0
    groups_dropped_failed: int = 0
    groups_dropped_no_signal: int = 0  # drop_no_signal: all rewards equal, a fresh prompt took its place
    prompts_replaced: int = 0  # failed for good, or too often: a fresh prompt took its place (prompt_retries.py)
    trajectories_received: int = 0
    trajectories_failed: int = 0
    trajectories_trained: int = 0
    trajectories_dropped: int = 0


@dataclass
class BufferState:
    """Everything a checkpoint needs to resume the ticket stream exactly."""

    version: int = 0
    steps_taken: int = 0
    next_group: int = 0
    rng_state: tuple | None = None
    requeued: list[dict] = field(default_factory=list)


class TrajectoryBuffer:
    keeps_long_queue = False  # tail batching restores a checkpoint's long queue itself
    def __init__(self, tasks: list[TaskShare], groups_per_step: int, alpha: int, seed: int = 0,
                 extra_groups: int = 0, prepare_ahead: bool = False, drop_no_signal: bool = False,
                 max_failing_s: float = DEFAULT_MAX_FAILING_S):
        self.tasks = tasks
        self._shares = {t.name: t for t in tasks}
        self.groups_per_step = groups_per_step
        self.alpha = alpha
        self.prepare_ahead = prepare_ahead  # issue the next step's tickets early, held (module doc)
        self.extra_groups = extra_groups  # redundant groups: stragglers stop mattering
        self.drop_no_signal = drop_no_signal  # DAPO's dynamic sampling (module doc)
        self._no_signal_dropped = 0  # since the last `advance`
        self._group_size = {t.name: t.group_size for t in tasks}
        self.rng = random.Random(seed)
        self.state = BufferState()
        self.counters = BufferCounters()
        self._credit = {t.name: 0.0 for t in tasks}
        self._mix = StepMix(tasks)  # each step's batch in the tasks' shares (step_mix.py)
        self._requeued: deque[Ticket] = deque()
        self.retries = PromptRetries()  # re-roll a failed group's prompt, or replace it
        self._open: dict[str, list[Trajectory]] = {}
        self._tickets: dict[str, Ticket] = {}
        self._ready: deque[list[Trajectory]] = deque()
        # Groups handed to the trainer since the last `advance`: not trained until then, so a
        # checkpoint of a run stopped before its update can give them back (`export_state`).
        self._taken: list[list[Trajectory]] = []
        self._outstanding = 0  # tickets issued whose group is not yet complete or dropped
        self._granted = 0  # tickets issued that count towards a step (drops give theirs back)
        self._cond = asyncio.Condition()
        self._stopped = False
        self.last_error = ""
        self.failures: dict[str, int] = {}  # failed trajectories by status, the run's totals
        self._failed_in_a_row = 0
        # Past this many failed groups in a row something is broken for every
        # episode (a reward endpoint down, an env that always raises): stop with
        # the cause instead of re-rolling forever.
        self.max_failed_in_a_row = max(16, 4 * groups_per_step)
        # ... and for this long: a restarting engine or emulator is not broken
        self.max_failing_s = float(max_failing_s)
        # When the current run of failed groups began: the window counts failing time only
        # (from the last success it also counted training, weight syncs and start-up, so the
        # first failures after a step longer than the window stopped a run at once).
        self._failing_since = time.monotonic()
        # Failed groups in a row whose every episode failed deterministically (the user's code:
        # a re-roll meets it again): at max_failed_in_a_row the run stops without the wait.
        self._deterministic_in_a_row = 0
        self._deterministic_cause: Trajectory | None = None  # the last such failure

    # -- ticket stream ----------------------------------------------------------------
    def _quota(self) -> int:
        # Groups may be started for steps up to `steps_taken + alpha`; dropped
        # groups give their place back (their ticket is re-issued).
        allowed = (self.state.steps_taken + 1 + self.alpha) * self.groups_per_step + self.extra_groups
        return allowed - self._granted

    def _pick_task(self) -> TaskShare:
        # Smooth weighted round robin: deterministic shares, no long droughts of one task.
        total = sum(t.weight for t in self.tasks)
        for t in self.tasks:
            self._credit[t.name] += t.weight
        best = max(self.tasks, key=lambda t: self._credit[t.name])
        self._credit[best.name] -= total
        return best

    def _new_ticket(self) -> Ticket:
        if self._requeued:
            t = self._requeued.popleft()
            return Ticket(f"g{self.state.next_group}", t.task, t.seed, t.group_size, self.state.version)
        share = self._pick_task()
        return Ticket(f"g{self.state.next_group}", share.name, self.rng.randrange(2**31), share.group_size,
                      self.state.version)

    async def next_ticket(self) -> Ticket | None:
        """Blocks until the staleness bound allows another group; None once stopped."""
        tickets = await self.next_tickets(1)
        return tickets[0] if tickets else None

    async def next_tickets(self, n: int) -> list[Ticket] | None:
        """Blocks until at least one group may start, then issues up to `n`; None once stopped.

        A worker asks for as many as it has free slots: one call per burst
        instead of one per group (each Ray call costs the start of a step ~1 ms)."""
        if n < 1:
            raise ValueError(f"next_tickets: n must be >= 1, got {n}")
        async with self._cond:
            await self._cond.wait_for(lambda: self._stopped or self._can_issue())
            if self._stopped:
                return None
            tickets = []
            while len(tickets) < n and self._can_issue():
                tickets.append(self._issue())
            return tickets

    def _can_issue(self) -> bool:
        if self._quota() > 0:
            return True
        # Held tickets only once the open groups are done (the trainer's turn): handed
        # out as a step opens, their resets took the CPU its first requests needed.
        return (self.prepare_ahead and self._quota() + self.groups_per_step > 0
                and all(t.opens_at_step > self.state.steps_taken for t in self._tickets.values()))

    def _issue(self) -> Ticket:
        held = self._quota() <= 0  # only prepare_ahead issues past the quota: one step's worth
        ticket = self._new_ticket()
        if held:
            ticket.opens_at_step = self.state.steps_taken + 1
        self._granted += 1
        self._register(ticket)
        return ticket

    async def wait_step(self, step: int) -> int | None:
        """Blocks until the buffer has taken `step` steps; the weight version then
        served, or None once stopped (a held group's signal to start)."""
        async with self._cond:
            await self._cond.wait_for(lambda: self._stopped or self.state.steps_taken >= step)
            return None if self._stopped else self.state.version

    def _register(self, ticket: Ticket) -> None:
        """The bookkeeping of every issued ticket, whoever decided to issue it."""
        self.state.next_group += 1
        self._tickets[ticket.group_id] = ticket
        self._open[ticket.group_id] = []
        self._outstanding += 1
        self.counters.tickets_issued += 1

    # -- trajectories in ----------------------------------------------------------------
    async def put(self, traj: Trajectory) -> None:
        await self.put_many([traj])

    async def put_many(self, trajs: list[Trajectory]) -> None:
        """Hands in finished trajectories (a worker sends a whole group in one call)."""
        async with self._cond:
            for traj in trajs:
                self._accept(traj)
            self._cond.notify_all()

    def _accept(self, traj: Trajectory) -> None:
        self.counters.trajectories_received += 1
        members = self._open.get(traj.group_id)
        if members is None:  # its group was dropped meanwhile
            self.counters.trajectories_dropped += 1
            return
        members.append(traj)
        ticket = self._tickets[traj.group_id]
        if len(members) < ticket.group_size:
            return
        del self._open[traj.group_id]
        del self._tickets[traj.group_id]
        self._outstanding -= 1
        ok = [t for t in members if t.status == "ok"]
        failed = len(members) - len(ok)
        for t in members:
            if t.status != "ok":
                self._failed(t)
        if len(ok) < 2:  # GRPO needs two to compare; re-roll the same prompt
            self._group_failed(members)
            self.counters.trajectories_dropped += len(members)
            if self.retries.replace(ticket.task, ticket.seed, members):  # a re-roll would fail again
                self.counters.prompts_replaced += 1  # its slot goes to a fresh ticket
            else:
                self._requeued.append(ticket)
            self._granted -= 1
        else:
            self.retries.succeeded(ticket.task, ticket.seed)
            self.counters.trajectories_dropped += failed
            self._group_completed()  # the system works, whatever the rewards say
            if self._drops_no_signal(ok):
                self.counters.groups_dropped_no_signal += 1
                self.counters.trajectories_dropped += len(ok)
                self._granted -= 1  # its place goes to a fresh prompt: the same one would likely tie again
                return
            self._ready.append(ok)

    def _drops_no_signal(self, ok: list[Trajectory]) -> bool:
        """Drop this group of equal rewards? Only with `drop_no_signal`, within this step's allowance."""
        if not self.drop_no_signal or len({t.reward for t in ok}) > 1:
            return False
        if self._no_signal_dropped >= NO_SIGNAL_OVERSAMPLE * self.groups_per_step:
            return False
        self._no_signal_dropped += 1
        return True

    def _failed(self, traj: Trajectory) -> None:
        """Counts a failed trajectory under its status (env_failed, engine_failed,
        reward_failed, stale, prompt_too_long, ...): `buffer/failed/<status>` says which
        part of the system failed, where `buffer/trajectories_failed` only said how often."""
        self.counters.trajectories_failed += 1
        self.failures[traj.status] = self.failures.get(traj.status, 0) + 1
        self.last_error = f"{traj.status}: {traj.error}"[:500]

    def _group_failed(self, members: list[Trajectory] = ()) -> None:
        """A group that came back without two good episodes. `members`: what came back of it."""
        self.counters.groups_dropped_failed += 1
        if self._failed_in_a_row == 0:
            self._failing_since = time.monotonic()
        self._failed_in_a_row += 1
        # Deterministic only if every episode of it failed so: one that succeeded, or one that
        # failed for a cause that may pass, says the system can still work (the window decides).
        if members and all(t.status != "ok" and t.deterministic for t in members):
            self._deterministic_in_a_row += 1
            self._deterministic_cause = members[-1]
        else:
            self._deterministic_in_a_row = 0

    def _group_completed(self) -> None:
        self.counters.groups_completed += 1
        self._failed_in_a_row = 0
        self._deterministic_in_a_row = 0

    def failing(self) -> dict:
        """How close the run is to being stopped for its failures (`_raise_if_failing`)."""
        return {"failed_in_a_row": self._failed_in_a_row,
                "deterministic_in_a_row": self._deterministic_in_a_row,
                "max_failed_in_a_row": self.max_failed_in_a_row,
                "failing_for_s": time.monotonic() - self._failing_since if self._failed_in_a_row else 0.0,
                "max_failing_s": self.max_failing_s}

    def _raise_if_failing(self) -> None:
        """Ends the run once every group fails: at once when the user's code fails every episode
        the same way, else after long enough that nothing is merely restarting."""
        if self._deterministic_in_a_row >= self.max_failed_in_a_row:
            raise RolloutFailing(self._deterministic_message())
        failing_s = time.monotonic() - self._failing_since
        if self._failed_in_a_row >= self.max_failed_in_a_row and failing_s > self.max_failing_s:
            raise RolloutFailing(
                f"{self._failed_in_a_row} groups in a row failed (every episode in them lost), "
                f"failing for {failing_s:.0f} s (rollout.max_failing_s = {self.max_failing_s:g}); "
                f"failed trajectories by cause: {_by_status(self.failures)}; last error: {self.last_error}")

    def _deterministic_message(self) -> str:
        t = self._deterministic_cause
        assert t is not None
        share = self._shares.get(t.task)
        return (f"task {t.task!r}: every episode of the last {self._deterministic_in_a_row} groups failed, "
                f"none succeeded, with an error of the task's own code: {t.status}: {t.error[:500]}. "
                f"A re-roll meets it again, so the run stops now (rollout.max_failing_s = "
                f"{self.max_failing_s:g} s waits out only what may pass: an engine or service restarting, "
                f"a time-out). {_what_to_check(t.status, share)}")

    # -- groups out ----------------------------------------------------------------------
    def _drop_stale(self, version: int) -> None:
        fresh: deque[list[Trajectory]] = deque()
        for group in self._ready:
            if version - min(t.min_version for t in group) > self.alpha:
                self.counters.groups_dropped_stale += 1
                self.counters.trajectories_dropped += len(group)
                task, seed = group[0].task, group[0].seed
                self._requeued.append(Ticket("", task, seed, self._group_size[task], version))
                self._granted -= 1
            else:
                fresh.append(group)
        self._ready = fresh

    async def get_batch(self, num_groups: int, version: int) -> list[list[Trajectory]]:
        """The next `num_groups` complete groups, none staler than alpha at `version`."""
        async with self._cond:
            while True:
                self._raise_if_failing()
                self._drop_stale(version)
                if self._stopped:
                    batch = [self._ready.popleft() for _ in range(min(num_groups, len(self._ready)))]
                    break
                batch = self._mix.take(self._ready, num_groups, self._on_the_way)
                if batch is not None:
                    break
                self._cond.notify_all()  # dropped groups opened quota for new tickets
                await self._cond.wait()
            self.counters.trajectories_trained += sum(len(g) for g in batch)
            self._taken += batch
            return batch

    def _on_the_way(self, task: str) -> bool:
        """May a group of `task` still finish before the next step opens?

        An open ticket that is not held for a later step will, and so will a
        re-issued one while the staleness bound lets tickets out."""
        if any(t.task == task and t.opens_at_step <= self.state.steps_taken for t in self._tickets.values()):
            return True
        return self._quota() > 0 and any(t.task == task for t in self._requeued)

    async def advance(self, version: int) -> None:
        """The trainer took a step and now serves `version`: open the next step's tickets."""
        async with self._cond:
            self.state.version = version
            self.state.steps_taken += 1
            self._taken.clear()  # trained
            self._mix.commit()
            self._no_signal_dropped = 0
            self._cond.notify_all()

    async def stop(self) -> None:
        async with self._cond:
            self._stopped = True
            self._cond.notify_all()

    # -- checkpoint ----------------------------------------------------------------------
    def export_state(self, untrained: bool = False) -> dict:
        """The state a resume starts from. `untrained`: the groups taken since the last
        `advance` were not trained (the run stopped before its update), so they are saved
        as never taken: their prompts are re-issued and `trajectories_trained` leaves them out."""
        # In-flight and ready groups are not saved: on resume their tickets are
        # re-issued (requeued), so no prompt of the stream is skipped.
        taken = self._taken if untrained else []
        pending = [self._tickets[g] for g in self._open] + [
            Ticket("", g[0].task, g[0].seed, self._group_size[g[0].task], 0) for g in [*taken, *self._ready]
        ] + list(self._requeued)
        counters = asdict(self.counters)
        counters["trajectories_trained"] -= sum(len(g) for g in taken)
        return {"version": self.state.version, "steps_taken": self.state.steps_taken,
                "next_group": self.state.next_group, "rng_state": self.rng.getstate(),
                "credit": dict(self._credit), "batch_credit": dict(self._mix.committed if taken else self._mix.credit), "counters": counters, "failures": dict(self.failures),
                "requeued": [{"task": t.task, "seed": t.seed, "group_size": t.group_size} for t in pending]}

    def import_state(self, state: dict) -> None:
        self.state.version = state["version"]
        self.state.steps_taken = state["steps_taken"]
        self.state.next_group = state["next_group"]
        self._granted = self.state.steps_taken * self.groups_per_step
        rng_state = state["rng_state"]
        self.rng.setstate((rng_state[0], tuple(rng_state[1]), rng_state[2]))
        self._credit.update(state.get("credit", {}))
        self._mix.credit.update({k: v for k, v in state.get("batch_credit", {}).items() if k in self._mix.credit})
        self._mix.commit()
        # The run's totals go on from where they were (before, `buffer/*` restarted at 0 on resume).
        self.counters = BufferCounters(**state.get("counters", {}))
        self.failures = dict(state.get("failures", {}))
        # A resume runs with this run's task list (job.py says what changed): a prompt of a
        # task no longer configured has no worker that can play it (its ticket killed the
        # worker on a KeyError, and the trainer then waited forever), and a re-rolled
        # prompt gets the group size configured now.
        saved = list(state["requeued"])
        if not self.keeps_long_queue:
            # A tail-batching run resumed in another mode: its deferred prompts (lost the race of
            # a short round, never trained) are only in the long queue, which nothing else reads;
            # a long round's fill prompts (drawn for it, not trained) only in `round_fill`.
            saved += [{"task": task, "seed": seed}
                      for task, seed in [*state.get("long_queue", []), *state.get("round_fill", [])]]
        self._requeued = deque(Ticket("", r["task"], r["seed"], self._group_size[r["task"]], self.state.version)
                               for r in saved if r["task"] in self._group_size)

    def wait_status(self) -> dict:
        """What a step waiting on this buffer is waiting for (train/rollout_wait.py)."""
        return {"ready": len(self._ready), "open": len(self._open), "failures": dict(self.failures),
                "last_error": self.last_error, **self.failing()}

    def metrics(self) -> dict[str, float]:
        m = {f"buffer/{k}": float(v) for k, v in vars(self.counters).items()}
        m["buffer/ready_groups"] = float(len(self._ready))
        m["buffer/open_groups"] = float(len(self._open))
        m.update({f"buffer/failed/{status}": float(n) for status, n in self.failures.items()})
        return m


def _by_status(failures: dict[str, int]) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(failures.items())) or "none"


def _what_to_check(status: str, share: TaskShare | None) -> str:
    """What the user should look at for a task whose every episode fails with `status`."""
    if status == "reward_failed":
        from roll_agentic.reward.reward_ref import shown_as

        file = shown_as(share.reward) if share is not None and share.reward else "the task's reward module"
        where = ""
        if share is not None and share.reward_state_dir:  # the run's emulator, stopped with it: its log file
            where = (f"; if it raised, the traceback is in "
                     f"{share.reward_state_dir}/logs/{share.reward_function}.log")
        elif share is not None and share.reward_function:
            where = f" (deployed as the function {share.reward_function}: if it raised, its log has the traceback)"
        return (f"Fix {file}: it raises (or returns no number) on the summaries real episodes send it; "
                f"the run's start check only calls reward(summary) once on a one-turn summary, and a "
                f"serverless run calls handler(event, context){where}")
    if status in ("env_failed", "prompt_too_long") and share is not None and share.env_id:
        kwargs = f" --kwargs '{json.dumps(share.env_kwargs, default=str)}'" if share.env_kwargs else ""
        check = f"Check the env with `roll-agentic env check {share.env_id}{kwargs}`"
        if status == "prompt_too_long":
            return f"Raise engine.max_model_len or shorten the task's first prompt. {check}"
        return check
    if status == "prompt_too_long":
        return "Raise engine.max_model_len or shorten the task's first prompt"
    return "Check the task's env with `roll-agentic env check <its env_id>`"
