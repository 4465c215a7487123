"""The multiplexer: a Ray actor that owns the pools and hands them to jobs phase by phase.

It owns the rollout nodes (engine actors) and the training nodes (trainer
slots, roll_agentic/mux/trainer_slot.py), and for each submitted job:
1. refuses it if it can never run here (admission.refusal);
2. profiles it: its first iteration runs through the shared FIFOs, timed
   (x `profile_margin` for the worst case), then its state is parked on disk;
3. places it with the RollMux policy (saturation, memory, trainer form, SLO
   check, cheapest candidate); a job that fits nowhere waits, its reason shown, and is
   retried whenever a job leaves; it is never placed so as to break an SLO.
   Jobs waiting together are placed together (roll_agentic/mux/placement_desk.py);
4. runs it in round robin inside its group (roll_agentic/mux/job_runner.py);
5. on the end, failure or cancellation of a job: saves its newest finished step
   (job_checkpoints.py), releases its permits, its residency and its nodes, and
   retries the queue; the others go on;
6. on `stop` (Ctrl-C or SIGTERM on `mux run`): every job ends at its next
   safe point with its newest step checkpointed, for `mux run --resume`
   (roll_agentic/mux/job_stop.py).

The actor is named (`ACTOR_NAME` in `NAMESPACE`) and not detached: it lives
as long as the `roll-agentic mux run` process that created it, which also
writes the Ray address for `mux submit` and `mux status` to find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict
from pathlib import Path

import ray

from roll_agentic.config import Config
from roll_agentic.mux import admission
from roll_agentic.mux.actor_calls import on_current_slot, pin_actors
from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.job_dirs import job_config
from roll_agentic.mux.job_exit import run_to_end, stopped
from roll_agentic.mux.job_runner import JobRunner
from roll_agentic.mux.job_state import JobRecord, JobState
from roll_agentic.mux.mux_config import JobSpec, MuxConfig
from roll_agentic.mux.phase_board import PhaseBoard
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.placement_desk import PlacementDesk
from roll_agentic.mux.profile import PhaseKind, Pool
from roll_agentic.mux.trainer_slot import TrainerSlot

ACTOR_NAME = "roll-agentic-mux"
NAMESPACE = "roll-agentic"
SLOT_RELEASE_WAIT_S = 30.0  # how long a job's exit waits for each trainer slot to drop its state
NEW_TRAINER_WAIT_S = 300.0  # a replacement trainer process that does not answer by then fails the restart


class Multiplexer:
    def __init__(self, m: MuxConfig, run_dir: str, pool_model_path: str):
        self.m, self.run_dir, self.pool_model_path = m, Path(run_dir), pool_model_path
        self.board = PhaseBoard()
        self.spec = admission.cluster_spec(m)
        self.book = GroupBook(self.spec)
        self.policy = RollMuxPolicy(self.spec, headroom=m.slo_headroom)
        self.desk = PlacementDesk(self.book, self.policy)
        self.records: dict[str, JobRecord] = {}
        self.runners: dict[str, JobRunner] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.phys: dict[int, str] = {}  # book node id -> physical node name
        self.engines: dict[str, list] = {}
        self.slots: dict[str, object] = {}
        self.trainer_restarts: dict[str, int] = {}  # training node -> trainer processes replaced
        self._changed: asyncio.Condition | None = None
        self._started = False
        self._failing: set[str] = set()  # jobs the multiplexer ends for a fault (shown failed, not cancelled)
        self._stopping = False  # `stop` was called: jobs end checkpointed, none is admitted
        self.closing: set[str] = set()  # jobs in their clean-up (job_exit.py): cancel and stop leave them be
        self._probing: dict[str, list[str]] = {}  # job -> the nodes its probe was given (until it ends)
        self._cancelled: set[str] = set()  # jobs `cancel` ends: their newest step saved first

    async def start(self) -> bool:
        """Builds the pools: engines per rollout node, one trainer process per training node."""
        if self._started:
            return True
        from roll_agentic.engine.host import engine_actor_class

        m = self.m
        cfg = Config()
        cfg.engine.max_batch, cfg.engine.max_model_len = m.max_batch, m.max_model_len
        e = cfg.engine  # the vLLM engines' memory and cache (job_engine_config.py: MUX_KEY)
        e.kv_cache_gib, e.gpu_memory_utilization, e.enable_prefix_caching = (
            m.kv_cache_gib, m.gpu_memory_utilization, m.enable_prefix_caching)
        actor = engine_actor_class(0.0)
        for r in range(m.rollout_nodes):
            name = f"rollout{r}"
            self.engines[name] = [actor.remote(m.backend, self.pool_model_path, cfg.engine, seed=r * 100 + i,
                                               pool=name, hardware="rollout") for i in range(m.engines_per_node)]
            self.board.add_node(name, Pool.ROLLOUT.value)
        for t in range(m.train_nodes):
            name = f"train{t}"
            self.slots[name] = self._new_slot(name)
            self.board.add_node(name, Pool.TRAIN.value)
        await asyncio.gather(*(e.ping.remote() for es in self.engines.values() for e in es),
                             *(s.ping.remote() for s in self.slots.values()))
        await pin_actors([e for es in self.engines.values() for e in es], m.rollout_cpus)
        await pin_actors(list(self.slots.values()), m.train_cpus)
        self._changed = asyncio.Condition()
        self._started = True
        return True

    def _new_slot(self, name: str):
        m = self.m
        return ray.remote(num_cpus=0, max_concurrency=1)(TrainerSlot).remote(
            name, m.residency_budget_bytes, m.train_threads, m.flush_denormal)

    async def _trainer_lost(self, node: str, job: str, why: str) -> None:
        """`job`'s train phase found `node`'s trainer wedged or dead: the node gets a new one.

        A slot serves one call at a time, so a wedged one failed every job that
        trained there after it, each after its own phase_timeout_s, for the
        multiplexer's whole life. Called while `job` still holds the node: no
        other job's phase reaches the old trainer in between. Every live job is
        registered on the new trainer. `job`, and the jobs whose newest state was
        in the old process (trained there since their last checkpoint), go back to
        their last checkpoint at their next train phase (`JobRunner._roll_back`),
        at most `max_rollbacks` times each; past that, or if the new trainer
        refuses them, they fail saying why. The others switch in cold from their
        checkpoints."""
        with contextlib.suppress(Exception):
            ray.kill(self.slots[node], no_restart=True)
        new = self.slots[node] = self._new_slot(node)
        self.trainer_restarts[node] = self.trainer_restarts.get(node, 0) + 1
        try:
            await asyncio.wait_for(new.ping.remote(), NEW_TRAINER_WAIT_S)
        except TimeoutError:  # said as such: the job that asked failed with a bare "TimeoutError: "
            raise RuntimeError(f"the new trainer process on {node} did not start within {NEW_TRAINER_WAIT_S:.0f}s "
                               f"(after: {why})") from None
        await pin_actors([new], self.m.train_cpus)
        for name, runner in list(self.runners.items()):
            rec = self.records[name]
            if rec.state.final or runner.slot_args is None:
                continue
            reason = ""
            try:
                await new.register.remote(name, *runner.slot_args)
                if node in rec.nodes and "state_bytes" in rec.profile:  # placed there: host memory held
                    await new.reserve.remote(name, int(rec.profile["state_bytes"]))
            except Exception as err:  # noqa: BLE001 - that job cannot train there; the others go on
                reason = f"the new trainer refused it: {type(err).__name__}: {err}"
            if rec.state.final:  # it ended meanwhile: its release may have been served before these
                with contextlib.suppress(Exception):
                    await new.release.remote(name)
                continue
            lost = name == job or (runner.state_node == node and not runner.checkpointed_at_version())
            if lost and not reason:
                if runner.rollbacks < self.m.max_rollbacks:
                    runner.rollback_reason = f"its trainer on {node} was restarted ({job}: {why})"
                    continue
                reason = (f"its state since its last checkpoint was in that process, and it was rolled back "
                          f"{runner.rollbacks}x already (max_rollbacks={self.m.max_rollbacks})")
            if reason and name != job:  # `job` fails itself, with its own reason
                rec.reason = (f"its trainer on {node} was restarted ({job}: {why}), and {reason} "
                              "(its checkpoints stay in its run directory)")
                self._failing.add(name)
                self.tasks[name].cancel()

    # -- submission -------------------------------------------------------------------------
    def _job_config(self, cfg: Config, name: str, engines: int, resume: bool = False) -> Config:
        # A folder of its own under jobs/; resumed, the one of its newest checkpoint (job_dirs.py).
        return job_config(cfg, self.run_dir / "jobs", name, engines, resume)

    async def submit(self, cfg: Config, spec: JobSpec, resume: bool = False) -> dict:
        """Adds a job. `resume`: it goes on from its checkpoint in this run directory, if it has one."""
        from roll_agentic.train.job_setup import resolve_model_path

        if self._stopping:
            raise ValueError(f"the multiplexer is stopping: job {spec.name!r} not taken")
        if spec.name in self.records and not self.records[spec.name].state.final:
            raise ValueError(f"job {spec.name!r} is already here ({self.records[spec.name].state})")
        if spec.name in self.tasks and not self.tasks[spec.name].done():
            raise ValueError(f"job {spec.name!r} is still closing; submit it again in a moment")
        cfg = self._job_config(cfg, spec.name, self.m.engines_per_node, resume)
        rec = JobRecord(spec.name, spec.slo, cfg.trainer.total_steps, str(Path(cfg.output_dir) / cfg.run_name),
                        submitted_at=self.board.now(), first_admitted_end=self.m.profile_steps)
        earlier, self.records[spec.name] = self.records.get(spec.name), rec
        try:  # a job that cannot start is refused with the reason, never left "profiling"
            model_path = resolve_model_path(cfg)
            # Off the loop: the check builds, resets and steps each task's env and scores a turn,
            # which may take up to env_step_timeout_s; status calls must not wait on it.
            why = await asyncio.to_thread(admission.refusal, cfg, model_path, self.pool_model_path, self.m)
        except Exception as err:  # noqa: BLE001 - the job's own problem, e.g. no model at model.path
            model_path, why = "", f"{type(err).__name__}: {err}"
        if why:
            rec.state, rec.reason, rec.finished_at = JobState.REFUSED, why, self.board.now()
            return rec.to_dict()
        await self.start()  # refusals need no pools; the first admissible job brings them up
        if self._stopping:  # `stop` came during the awaits above: its lifecycle would start outside stop's wait
            if earlier is None:
                self.records.pop(spec.name)
            else:
                self.records[spec.name] = earlier
            raise ValueError(f"the multiplexer is stopping: job {spec.name!r} not taken")
        self.tasks[spec.name] = asyncio.get_running_loop().create_task(self._lifecycle(cfg, rec, model_path))
        return rec.to_dict()

    def _free(self, pool: Pool) -> list[str]:
        used = set(self.phys.values())
        names = self.engines if pool is Pool.ROLLOUT else self.slots
        return [n for n in names if n not in used]

    def _probe_nodes(self) -> tuple[list[str], str]:
        # Free nodes first (nobody is slowed), the fewest probes on them first (jobs submitted
        # together all probed on the first free node, one after the other, while others idled);
        # else the node with the shortest FIFO.
        probing = [n for nodes in self._probing.values() for n in nodes]

        def pick(pool: Pool) -> str:
            free = set(self._free(pool))
            names = self.engines if pool is Pool.ROLLOUT else self.slots
            if free:
                return min((n for n in names if n in free), key=probing.count)
            return min(names, key=lambda n: (probing.count(n), len(self.board.nodes[n].fifo)))
        return [pick(Pool.ROLLOUT)], pick(Pool.TRAIN)

    async def _lifecycle(self, cfg: Config, rec: JobRecord, model_path: str) -> None:
        runner = JobRunner(cfg, rec, self.board, self.engines, self.slots, self.m.phase_timeout_s,
                           self.m.rollout_cpus, on_trainer_lost=self._trainer_lost,
                           max_rollbacks=self.m.max_rollbacks)
        self.runners[rec.name] = runner
        placed = False
        try:
            rollout_nodes, train_node = self._probe_nodes()
            self._probing[rec.name] = [*rollout_nodes, train_node]
            try:
                await runner.setup(model_path, train_node, rollout_nodes)
                if runner.version >= cfg.trainer.total_steps:  # resumed from its last step's checkpoint
                    await runner.evaluate_last()  # if stopped before it (`hold_unevaluated_row`)
                    rec.state = JobState.DONE
                    return
                prof = await runner.probe(rollout_nodes, train_node, self.m.profile_margin, self.m.profile_steps)
            finally:
                del self._probing[rec.name]
            if runner.stop_requested:  # its probe saved the step in hand
                return await stopped(rec, runner, self.m.phase_timeout_s)
            if runner.version >= cfg.trainer.total_steps:  # a job shorter than its probe
                rec.state = JobState.DONE
                return
            if prof["state_bytes"] > self.m.residency_budget_bytes:
                rec.state = JobState.REFUSED
                rec.reason = (f"job state {prof['state_bytes']} B exceeds the residency budget of "
                              f"{self.m.residency_budget_bytes} B per training node")
                return
            profile = admission.job_profile(rec.name, prof, rec.slo, admission.placement_form(cfg))
            rec.state = JobState.QUEUED
            async with self._changed:
                self.desk.add(profile)
                try:
                    while rec.name in self.desk.waiting:
                        await self._place_waiting()
                        if rec.name in self.desk.waiting:
                            await self._changed.wait()
                finally:
                    self.desk.drop(rec.name)  # cancelled while waiting
            placed = True
            rec.state, rec.reason = JobState.RUNNING, ""
            rec.first_admitted_end = len(rec.step_ends)  # its probe's came before (however many it took)
            await runner.run(lambda finished: self._next_phases(rec.name, finished))
            if runner.version < cfg.trainer.total_steps:  # `stop`: its step whole and saved
                return await stopped(rec, runner, self.m.phase_timeout_s)
            rec.state = JobState.DONE
        except asyncio.CancelledError:
            failed = rec.name in self._failing  # ended by the multiplexer for a fault, not cancelled
            self._failing.discard(rec.name)
            if self._stopping and not failed:  # before `_leave` below drops its state from host memory
                return await stopped(rec, runner, self.m.phase_timeout_s)
            rec.state = JobState.FAILED if failed else JobState.CANCELLED
            rec.reason = rec.reason or "cancelled"
            if rec.name in self._cancelled:  # `mux cancel`: its finished steps kept for a resume
                # Not a queued job's reason for waiting: what ended it, and where it was saved.
                rec.reason = "cancelled" + await run_to_end(runner.save_newest_step("cancelled"))
        except Exception as err:  # the job fails; the pools and the other jobs go on
            rec.state, rec.reason = JobState.FAILED, f"{type(err).__name__}: {err}"
            # Before `_leave` drops its state: the steps since its last due checkpoint are kept.
            rec.reason += await run_to_end(runner.save_newest_step("failed"))
        finally:
            self._cancelled.discard(rec.name)
            self.closing.add(rec.name)
            try:
                await run_to_end(self._close_job(rec, runner, placed))
            finally:
                self.closing.discard(rec.name)

    async def _close_job(self, rec: JobRecord, runner: JobRunner, placed: bool) -> None:
        """The end of a job's lifecycle: its nodes, residency and runner let go (`job_exit.py`)."""
        if not rec.state.final:  # cut short where it was to say how it ended (e.g. in `stopped`)
            rec.state, rec.reason = JobState.CANCELLED, rec.reason or "cancelled"
        rec.phase, rec.finished_at = "", self.board.now()
        rec.pending_rollback = None  # a job cancelled or failed before its roll-back: none to come
        try:
            await self._leave(rec, placed or rec.name in self.book.job_group)  # placed by another waiter
        finally:
            await runner.close()

    async def _place_waiting(self) -> None:
        """Place every waiting job that fits (together: `placement_desk.py`); wake the placed."""
        admitted, reasons = self.desk.place_waiting(self._free(Pool.ROLLOUT), self._free(Pool.TRAIN))
        for name, why in reasons.items():
            self.records[name].reason = why
        for a in admitted:
            self.phys.update(a.opened)
            rec = self.records[a.name]
            pin = a.group.pinning[a.name]
            rec.group = a.group.group_id
            rec.nodes = [self.phys[n] for n in (*pin.rollout_nodes, *pin.train_nodes)]
            try:
                for n in pin.train_nodes:  # the policy checked memory; the slot enforces it
                    await on_current_slot(self.slots, self.phys[n],
                                          lambda s, a=a, rec=rec: s.reserve.remote(a.name, int(rec.profile["state_bytes"])))
            except Exception as err:  # that job ends (its lifecycle releases it); the waiter placing it goes on
                rec.reason = f"residency reservation failed: {type(err).__name__}: {err}"
                self._failing.add(a.name)
                self.tasks[a.name].cancel()
        if admitted:
            self._changed.notify_all()

    def _next_phases(self, job: str, finished: PhaseKind | None) -> list[tuple[PhaseKind, list[str]]]:
        group = self.book.groups[self.book.job_group[job]]
        return [(p.kind, [self.phys[n] for n in p.nodes]) for p in self.policy.next_phases(group, job, finished)]

    async def _leave(self, rec: JobRecord, placed: bool) -> None:
        for slot in self.slots.values():
            # Bounded: a slot wedged in another call (a train phase that timed out) would
            # hold this job's exit, and its nodes, until it answered; the release stays
            # queued on the slot and runs once it does.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(slot.release.remote(rec.name), SLOT_RELEASE_WAIT_S)
        if placed and rec.name in self.book.job_group:
            for node in self.book.remove(rec.name):
                self.phys.pop(node.node_id, None)
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    # -- control and status ------------------------------------------------------------------
    async def stop(self, timeout_s: float | None = None) -> dict[str, dict]:
        """Ends every job at its next safe point with its newest whole step checkpointed
        (`mux run` on Ctrl-C or SIGTERM); returns each job's record. A job mid-step finishes
        that step (bounded by its phase time-out); any other is cancelled at once."""
        self._stopping = True
        for name, task in self.tasks.items():
            runner = self.runners.get(name)
            if not task.done() and name not in self.closing and (runner is None or runner.request_stop()):
                task.cancel()
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s or 2 * self.m.phase_timeout_s)
        return {name: rec.to_dict() for name, rec in self.records.items()}

    async def cancel(self, name: str) -> bool:
        """Ends a job, its newest finished step checkpointed first (`save_newest_step`). False if
        it was not running, or while stopping: `stop` ends it checkpointed (a cancel cutting its
        step there saved the trainer's next step under the step before's number)."""
        task = self.tasks.get(name)
        if task is None or task.done() or name in self.closing:  # ending already: its clean-up runs to its end
            return False
        if self._stopping:  # it ends stopped, its step saved: the cancel waits for that (bounded)
            await asyncio.wait([task], timeout=2 * self.m.phase_timeout_s)
            return False
        self._cancelled.add(name)
        # Cut inside its update, the trainer's state may be torn and nothing is saved: the
        # steps since its last due checkpoint were lost. The update ends first (bounded).
        runner, deadline = self.runners.get(name), time.monotonic() + self.m.phase_timeout_s
        while runner is not None and runner.updating and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return True

    def inject_fault(self, name: str) -> bool:
        """Kills the job's rollout workers, as a crash would (tests and drills)."""
        runner = self.runners.get(name)
        if runner is None or not runner.workers:
            return False
        for w in runner.workers:
            ray.kill(w)
        return True

    async def wait(self, names: list[str] | None = None, timeout_s: float | None = None) -> bool:
        """True once every named job (default: all) has finished, failed, or been refused."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            names_ = names or list(self.records)
            recs = [self.records[n] for n in names_ if n in self.records]
            # Final state and a finished lifecycle: its close (curve, worker stop) is done too.
            if all(r.state.final for r in recs) and all(self.tasks[n].done() for n in names_ if n in self.tasks):
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)

    def settings(self) -> MuxConfig:
        """The settings it started with: `mux submit` checks jobs' engine.* against its engines."""
        return self.m

    def status(self) -> dict:
        groups = [{"group_id": g.group_id, "nodes": [self.phys.get(n, str(n)) for n in g.nodes],
                   "members": list(g.pinning)} for g in self.book.groups.values()]
        return {"name": self.m.name, "run_dir": str(self.run_dir), "uptime_s": self.board.now(),
                "pool_busy_fraction": self.board.busy_fraction(0.0, self.board.now()),
                "nodes": self.board.snapshot(), "groups": groups, "trainer_restarts": dict(self.trainer_restarts),
                "jobs": [r.to_dict() for r in self.records.values()]}

    def result(self) -> dict:
        """What the summary needs: the jobs, the held intervals and the pass's span."""
        recs = list(self.records.values())
        start = min((r.submitted_at for r in recs), default=0.0)
        end = max((r.finished_at for r in recs), default=self.board.now())
        return {"start": start, "end": end, "pool_busy_fraction": self.board.busy_fraction(start, end),
                "jobs": {r.name: r.to_dict() for r in recs},
                "intervals": [asdict(i) for i in self.board.intervals]}

    async def shutdown(self) -> None:
        for name, task in list(self.tasks.items()):  # not `cancel`: after a stop, that waits for each
            if not task.done() and name not in self.closing:
                task.cancel()
        closing = [t for t in self.tasks.values() if not t.done()]
        if closing:  # their clean-up (slot releases, workers, emulators) before the pools go
            await asyncio.wait(closing, timeout=self.m.phase_timeout_s)
        for es in self.engines.values():
            for e in es:
                with contextlib.suppress(Exception):
                    await e.shutdown.remote()
                with contextlib.suppress(Exception):
                    ray.kill(e)
        for s in self.slots.values():
            with contextlib.suppress(Exception):
                ray.kill(s)

    def ping(self) -> bool:
        return True


def multiplexer_actor():
    """Async actor: job lifecycles are coroutines on its loop; status calls never queue behind a phase."""
    return ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=0)(Multiplexer)
