"""One training job driven phase by phase on pools it shares (inside the multiplexer actor).

The job keeps everything a solo `TrainingJob` has of its own -- buffer,
router, rollout workers, reward service, run dir, metrics, checkpoints,
learning curve -- and borrows the devices phase by phase through the
`PhaseBoard`:
- rollout: holding the rollout node, load the job's own weights file into
  the engines, open the step's tickets, wait for the batch, drain;
- train: holding the trainer node, switch the job's state in (warm from
  host memory, cold from its checkpoint), take the optimizer step, write the
  next weights file (the sync's write half), checkpoint when due.

Why the engines never serve one job's requests with another's weights: jobs
train synchronously (algo.alpha = 0), so a job's workers only hold tickets
between the `advance` that opens its step -- issued after its weights are
loaded, under its rollout permit -- and the batch that closes it; the
engines are drained before the permit is released, and every turn of every
batch is checked to carry the job's own weight version.

Evaluation (`eval.every`) runs on the same terms: `mux/job_evaluation.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import ray

from roll_agentic.config import Config, effective_pools
from roll_agentic.engine.router import Router, router_kwargs
from roll_agentic.mux.actor_calls import on_current_slot, pin_actors
from roll_agentic.mux.job_checkpoints import JobCheckpoints
from roll_agentic.mux.job_evaluation import HeldEvaluation
from roll_agentic.mux.job_rollback import TrainerLossRecovery
from roll_agentic.mux.job_state import JobRecord
from roll_agentic.mux.phase_board import PhaseBoard
from roll_agentic.mux.phase_waits import JobFailed, await_batch, drain, rollout_limit
from roll_agentic.mux.profile import PhaseKind
from roll_agentic.train.checkpoint import write_atomic
from roll_agentic.train.evaluation import evaluation_due
from roll_agentic.train.step_metrics import rollout_metrics
from roll_agentic.train.trainer import samples_from_groups
from roll_agentic.train.weight_sync import shared_memory_dir

# (kind, node names) of the phases a job enqueues after `finished` (None: it just joined).
NextPhases = Callable[[PhaseKind | None], list[tuple[PhaseKind, list[str]]]]


async def _engine_stats(engines: list) -> list[dict]:
    return list(await asyncio.gather(*(e.stats.remote() for e in engines)))


class JobRunner(HeldEvaluation, TrainerLossRecovery, JobCheckpoints):
    def __init__(self, cfg: Config, record: JobRecord, board: PhaseBoard, engines: dict[str, list],
                 slots: dict[str, object], phase_timeout_s: float, rollout_cpus: Sequence[int] = (),
                 on_trainer_lost: Callable[[str, str, str], Awaitable[None]] | None = None,
                 max_rollbacks: int = 0):
        self.cfg, self.record, self.board = cfg, record, board
        self.rollout_cpus = tuple(rollout_cpus)  # the rollout pool's cores: the job's workers run there
        self.name = record.name
        self.engines_by_node, self.slots = engines, slots
        self.phase_timeout_s = phase_timeout_s
        # (node, job, why): a train phase found the node's trainer wedged or dead; called
        # while this job still holds the node, so the multiplexer can replace the trainer
        # before another job's phase reaches the old one.
        self.on_trainer_lost = on_trainer_lost
        self.max_rollbacks = max_rollbacks
        self._rollback_reason = ""  # `rollback_reason`
        self._rolled_back = False  # the step just "trained" was a roll-back: nothing to log
        self.run_dir = Path(cfg.output_dir) / cfg.run_name
        self.slot_args: tuple | None = None  # what a trainer slot's `register` takes after the job's name
        self.state_node: str | None = None  # the training node whose memory holds the job's newest state
        self.version = 0
        self.model_path = ""
        self.workers: list = []
        self.worker_runs: list = []
        self.worker_engines: list[str] = []  # the rollout nodes the workers were built over
        self.reward_service = None
        self.reward_endpoint = ""
        self.weights_dir = shared_memory_dir(f"mux-{self.name}")
        self._phase: dict[str, float] = {}  # this step's phase timings
        self._groups: list = []
        self._log = None
        self._held_row: tuple[int, dict[str, float]] | None = None
        self._probing = False  # the probe holds both pools itself: its phases take no permits
        self._closed = False

    # -- set-up ----------------------------------------------------------------------------
    async def setup(self, model_path: str, train_node: str, rollout_nodes: list[str]) -> None:
        from roll_agentic.telemetry.metrics import MetricsLog
        from roll_agentic.train.job_setup import start_rewards
        from roll_agentic.train.resume_record import config_json

        cfg = self.cfg
        self.model_path = model_path
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.run_dir / "config.json", config_json(asdict(cfg)).encode())  # never left half written
        # A cancel interrupts the await, not the thread: the thread's result is still kept
        # (shielded), so that close() stops the emulator it started.
        started = asyncio.ensure_future(asyncio.to_thread(start_rewards, cfg, self.run_dir))
        started.add_done_callback(self._keep_reward_service)
        self.reward_service, self.reward_endpoint = await asyncio.shield(started)
        self.router = ray.remote(num_cpus=0)(Router).remote(**router_kwargs(cfg))
        self.buffer = self._new_buffer()
        self._log = MetricsLog(self.run_dir, cfg.telemetry.tensorboard)
        await self.resume_from_checkpoint()  # trainer.resume: from its checkpoint (job_stop.py)
        await self.hold_unevaluated_row()  # its step's due evaluation, if a stop came first (job_checkpoints.py)
        self.slot_args = (model_path, cfg.trainer, cfg.algo, cfg.engine.temperature, str(self.run_dir / "checkpoints"),
                          cfg.engine.top_p)
        await asyncio.gather(*(on_current_slot(self.slots, n, lambda s: s.register.remote(self.name, *self.slot_args))
                               for n in list(self.slots)))
        self._spawn_workers(rollout_nodes)
        await pin_actors([self.router, self.buffer, *self.workers], self.rollout_cpus)
        # Workers ready before the probe: their start-up is not a rollout phase.
        await self._worker_stats()

    def _keep_reward_service(self, started: asyncio.Future) -> None:
        if started.cancelled() or started.exception() is not None:
            return
        service, _endpoint = started.result()
        if service is None:
            return
        if self._closed:  # the job closed while it was starting: nobody else will stop it
            asyncio.get_running_loop().run_in_executor(None, service.stop)
        else:
            self.reward_service = service

    def _initial_weights(self) -> str:
        path = Path(self.model_path) / "model.safetensors"
        if not path.exists():
            raise JobFailed(f"{self.model_path} has no single model.safetensors for the engines' first load")
        return str(path)

    def _weights_path(self, version: int) -> str:
        return str(self.weights_dir / f"weights_v{version}.safetensors") if version else self._initial_weights()

    def _engines(self, nodes: list[str]) -> list:
        return [e for n in nodes for e in self.engines_by_node[n]]

    def _spawn_workers(self, nodes: list[str]) -> None:
        from roll_agentic.train.job_setup import spawn_rollout_workers

        self.workers = spawn_rollout_workers(self.cfg, self.model_path, self._engines(nodes), self.router,
                                             self.buffer, self.reward_endpoint)
        self.worker_runs, self.worker_engines = [], list(nodes)

    async def _move_workers(self, nodes: list[str]) -> None:
        """Placement pinned the job to other rollout nodes than its probe's: new workers there.

        Runs under the rollout permit, weights loaded. The buffer is rebuilt from its
        checkpoint state too: a killed worker's pending ticket request would otherwise
        be granted a ticket nobody rolls out.
        """
        await self._restart_buffer((await self._run_state())["buffer"])  # this step's tickets open now
        # The router outlives the killed workers: their dead marks (cleared only by their
        # watchers) and their trajectories' slots would keep healthy engines out for good.
        await self.router.reset.remote()
        self._spawn_workers(nodes)
        await pin_actors([self.buffer, *self.workers], self.rollout_cpus)
        self.worker_runs = [w.run.remote() for w in self.workers]

    async def _restart_buffer(self, state: dict | None) -> None:
        """The workers stopped and a new buffer from `state` (None: a fresh one): no ticket
        a killed worker asked for is granted to nobody."""
        self._kill_workers()
        with contextlib.suppress(Exception):
            ray.kill(self.buffer)
        self.buffer = self._new_buffer()
        if state is not None:
            await self.buffer.import_state.remote(state)

    def _new_buffer(self):
        from roll_agentic.train.job_setup import new_buffer

        return new_buffer(self.cfg, self.run_dir, multiplexed=True)

    async def _worker_stats(self) -> list[dict]:
        # A worker that died between phases fails the job with the same reason as one
        # that dies mid-phase, not with whichever actor call happened to notice first.
        try:
            return list(await asyncio.gather(*(w.stats.remote() for w in self.workers)))
        except ray.exceptions.RayActorError as err:
            raise JobFailed(f"a rollout worker stopped between phases: {type(err).__name__}") from err

    def _kill_workers(self) -> None:
        for w in self.workers:
            with contextlib.suppress(Exception):
                ray.kill(w)
        self.workers, self.worker_runs, self.worker_engines = [], [], []

    # -- phases -------------------------------------------------------------------------------
    def _hold(self, kind: str, nodes: list[str]):
        if self._probing:
            return contextlib.nullcontext(0.0)
        return self.board.hold(self.name, kind, nodes)

    async def rollout(self, nodes: list[str], probe: bool = False) -> None:
        engines = self._engines(nodes)
        kind = "probe-rollout" if probe else "rollout"
        self.record.phase = f"waiting {kind}"
        step_t0 = time.perf_counter()
        async with self._hold(kind, nodes) as wait_s:
            self.record.phase = kind
            t0 = time.perf_counter()
            # Like a train phase, all of it (not only the batch wait) has a limit: see rollout_limit.
            async with rollout_limit(kind, self.phase_timeout_s, nodes, 1 + (self._held_row is not None)):
                try:
                    await drain(engines)
                    before = await _engine_stats(engines)
                    await self._load_weights(engines)
                    load_s = time.perf_counter() - t0
                    if nodes != self.worker_engines:
                        await self._move_workers(nodes)
                    elif not self.worker_runs:  # the first step's tickets are open from the start
                        self.worker_runs = [w.run.remote() for w in self.workers]
                    else:
                        await self.buffer.advance.remote(self.version)
                    # From here the buffer may hand the batch out (even if this await is cut): a stop
                    # or failure before the update puts its prompts back (the buffer's taken groups
                    # since the advance above; none yet is harmless). Set only after the batch had
                    # come, a stop in the held evaluation below skipped those prompts for good.
                    self.untrained_batch = True
                    groups = await await_batch(  # fails the job if a worker stops or the batch overruns
                        self.buffer.get_batch.remote(self.cfg.algo.groups_per_step, self.version),
                        self.worker_runs, self.phase_timeout_s)
                    # The previous step's evaluation, on its weights (loaded above), while the job
                    # still holds the node; after the batch, so the step's episodes are not slowed.
                    eval_s = await self._evaluate_held_row() if self._held_row is not None else 0.0
                    await drain(engines)
                    after = await _engine_stats(engines)
                except BaseException:
                    # A job that fails or is cancelled mid-phase leaves the engines empty for the next.
                    self._kill_workers()
                    with contextlib.suppress(Exception):
                        await drain(engines, timeout_s=60.0)
                    raise
        bad = {turn.weight_version for g in groups for t in g for turn in t.turns} - {self.version}
        if bad:
            raise JobFailed(f"isolation check: turns served by weight versions {sorted(bad)}, expected {self.version}")
        if self.version:
            Path(self._weights_path(self.version)).unlink(missing_ok=True)  # the engines hold it now
        self._groups = groups
        # rollout_s is the whole phase as held, an evaluation in it included.
        self._phase = {"step_t0": step_t0, "rollout_wait_s": wait_s, "rollout_s": time.perf_counter() - t0,
                       "load_s": load_s, "eval_s": eval_s}
        self._stats = (before, after)

    async def _load_weights(self, engines: list) -> None:
        """The job's weights of `self.version` into the (drained) engines, under its rollout permit."""
        versions = await asyncio.gather(*(e.load_weights.remote(self.version, self._weights_path(self.version))
                                          for e in engines))
        if any(v != self.version for v in versions):
            raise JobFailed(f"engines serve versions {versions}, expected {self.version}")

    async def train(self, node: str, probe: bool = False, park: bool = False) -> dict:
        """One optimizer step under the trainer permit; returns the switch record."""
        kind = "probe-train" if probe else "train"
        self.record.phase = f"waiting {kind}"
        self.training = True  # until its step is logged (`sync`): a stop lets it finish (job_stop.py)
        async with self._hold(kind, [node]) as wait_s:
            if self.rollback_reason and not probe:
                return await self._roll_back(node)
            # Looked up once the node is ours: the trainer may have been replaced while we waited.
            slot = self.slots[node]
            self.record.phase = kind
            t0 = time.perf_counter()
            self.waiting_on = "trainer"
            before = self.version
            try:
                # Like a rollout, a train phase that runs past its limit fails its job and
                # lets go of the node: a wedged trainer used to hold it, and every job
                # waiting for it, forever, with nothing in the status but "train".
                async with asyncio.timeout(self.phase_timeout_s):
                    switch = await slot.switch_in.remote(self.name)
                    self.state_node = node
                    t1 = time.perf_counter()
                    samples = samples_from_groups(self._groups, self.cfg.algo.adv_eps, self.cfg.algo.advantage)
                    self.updating = True  # until it answers: a failure may leave the state torn
                    train_m = await slot.train.remote(self.name, samples)
                    self.version += 1
                    self.updating = self.untrained_batch = False
                    self.unlogged_step = (self.version, train_m)
                    t2 = time.perf_counter()
                    write_s = await slot.write_weights.remote(self.name, self._weights_path(self.version))
                    await self._save_if_due(slot, node, park)
            except (TimeoutError, ray.exceptions.RayActorError) as err:
                what = "its trainer" if self.waiting_on == "trainer" else "its trajectory buffer"
                why = (f"{kind} phase exceeded phase_timeout_s={self.phase_timeout_s} on {node}: {what} "
                       "did not answer" if isinstance(err, TimeoutError)
                       else f"{kind} phase on {node}: {what}'s process died ({type(err).__name__})")
                if self.waiting_on == "trainer" and self.on_trainer_lost is not None:
                    await self._trainer_lost(node, why)
                if self.waiting_on == "trainer" and self.version > before and self.checkpointed_at_version():
                    # Lost after the step's checkpoint was complete: nothing of it was lost, the
                    # step ends as one (a roll-back to it dropped its metrics and step end).
                    self.rollback_reason, self.state_node = "", None  # in its checkpoint only
                elif not (self.rollback_reason and not probe):
                    if self.waiting_on == "trainer" and not probe and self.rollbacks >= self.max_rollbacks:
                        why += f"; rolled back {self.rollbacks}x already (max_rollbacks={self.max_rollbacks})"
                    raise JobFailed(f"{why} (its checkpoints stay in its run directory)") from None
            except ray.exceptions.RayTaskError as err:  # the trainer or buffer raised: said in one line
                what = "its trainer" if self.waiting_on == "trainer" else "its trajectory buffer"
                cause = err.cause if isinstance(getattr(err, "cause", None), Exception) else err
                raise JobFailed(f"{kind} phase on {node}: {what} failed: {type(cause).__name__}: {cause}") from err
            if self.rollback_reason and not probe:  # the node has a new trainer: go on from the checkpoint
                self.updating = False  # the torn state, if any, died with the old trainer
                return await self._roll_back(node)
        self.record.step_ends.append(self.board.now())
        self.record.step = self.version
        record = asdict(switch)
        if record["kind"] != "none":
            self.record.switches.append(record)
        self._phase.update({"train_wait_s": wait_s, "switch_s": t1 - t0, "train_s": t2 - t1, "write_s": write_s,
                            "switch_kind": record["kind"]})
        self._train_m = train_m
        return record

    async def sync(self) -> dict[str, float]:
        """After the train phase: no device held; the step's metrics are logged."""
        try:
            return await self._log_step()
        finally:
            self.training = False  # the step is whole: a stop may cancel the job from here

    async def _log_step(self) -> dict[str, float]:
        if self._rolled_back:  # no step was taken: the next rollout starts from the checkpoint
            self._rolled_back = False
            return {}
        before, after = self._stats
        p = self._phase
        step_s = time.perf_counter() - p["step_t0"]
        worker_stats = await self._worker_stats()
        routing = await self.router.snapshot.remote()
        buffer_m = await self.buffer.metrics.remote()
        m = rollout_metrics(self._groups, self.version - 1, after, before, list(worker_stats), step_s,
                            routing=routing, prices={x.name: x.price_per_hour for x in effective_pools(self.cfg)})
        m.update(self._train_m)
        m.update(buffer_m)
        m.update({"step": float(self.version), "time/step_s": step_s, "time/rollout_wait_s": p["rollout_s"],
                  "time/train_s": p["train_s"], "time/sync_s": p["write_s"] + p["load_s"],
                  "mux/rollout_queue_s": p["rollout_wait_s"], "mux/train_queue_s": p["train_wait_s"],
                  "mux/switch_s": p["switch_s"], "mux/switch_warm": float(p["switch_kind"] == "warm"),
                  "mux/switch_cold": float(p["switch_kind"] == "cold")})
        if evaluation_due(self.cfg.eval, self.version, self.cfg.trainer.total_steps):
            # The engines get this step's weights with the job's next rollout permit: the
            # row waits for its evaluation there (module docstring), one row per step as solo.
            self._held_row = (self.version, m)
        else:
            await asyncio.to_thread(self._log.write, self.version, m)
        self.unlogged_step = None
        return m

    # -- the whole job ------------------------------------------------------------------------
    async def probe(self, rollout_nodes: list[str], train_node: str, margin: float, steps: int = 2) -> dict[str, float]:
        """The job's first iterations, timed: its conservative profile (it trains on them too).

        The first is a warm-up (env construction, first batches); the last is measured and
        scaled by `margin`. Then the job's state is parked on disk: it is not resident
        until admitted, so its first admitted switch-in is cold.
        """
        # A resumed job may have fewer steps left than a probe takes: it trains no further than its last.
        steps = max(1, min(steps, self.cfg.trainer.total_steps - self.version))
        # The probe holds both pools for all its iterations: the profile is of the job alone
        # (not of it next to whatever else shares this machine's cores), and its state, not
        # yet resident, is never switched out before it is parked.
        self.record.phase = "waiting probe"
        async with self.board.hold(self.name, "probe", [], idle=[*rollout_nodes, train_node]):
            self._probing = True
            try:
                for i in range(steps):
                    await self.rollout(rollout_nodes, probe=True)
                    await self.train(train_node, probe=True, park=i == steps - 1)
                    await self.sync()
                    if self.stop_requested:  # saved while the probe still holds its nodes
                        await self.checkpoint_for_stop()
                        return dict(self.record.profile)
                if self.version >= self.cfg.trainer.total_steps:  # a job no longer than its probe
                    await self.evaluate_last()
            finally:
                self._probing = False
        p = self._phase
        prof = self.record.profile
        # Switch-ins are the policy's warm_switch_s, not phase time: only the step counts.
        # An evaluation in the measured phase is left out too (as checkpoints are from
        # train_s): the profile is of a training step, whether or not the probe's last one
        # held an evaluation (eval.every); evaluated steps run longer by time/eval_s.
        prof.update({"roll_s": (p["rollout_s"] - p["eval_s"]) * margin, "train_s": p["train_s"] * margin,
                     "sync_s": p["write_s"] + p["load_s"]})
        prof["solo_iter_s"] = prof["roll_s"] + prof["train_s"] + prof["sync_s"]
        return prof

    async def run(self, next_phases: NextPhases) -> None:
        """Round robin from the job's second step: rollout -> train -> sync, as permits allow."""
        finished: PhaseKind | None = None
        while self.version < self.cfg.trainer.total_steps:
            for kind, nodes in next_phases(finished):
                if self.stop_requested and not self.training:  # stopped with its step whole (job_stop.py)
                    return
                if kind is PhaseKind.ROLLOUT:
                    await self.rollout(nodes)
                elif kind is PhaseKind.TRAIN:
                    await self.train(nodes[0])
                else:
                    await self.sync()
                finished = kind
        if finished is PhaseKind.TRAIN:  # the last step's metrics
            await self.sync()
        if not self.stop_requested:
            await self.evaluate_last()
        self.record.phase = ""

    async def close(self) -> None:
        from roll_agentic.telemetry.plots import reward_curve

        self._closed = True
        self._kill_workers()
        for actor in ("buffer", "router"):
            with contextlib.suppress(Exception):
                ray.kill(getattr(self, actor))
        if self._log is not None:
            if self._held_row is not None:  # the job ended before its evaluation: the row without it
                with contextlib.suppress(Exception):
                    self._log.write(*self._held_row)
                self._held_row = None
            rows = self._log.read()
            self._log.close()
            if self.cfg.telemetry.plots and rows:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(reward_curve, rows, [t.name for t in self.cfg.tasks],
                                            self.run_dir / "reward_curve.png")
        for p in self.weights_dir.glob("*"):
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.weights_dir.rmdir()
        if self.reward_service is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.reward_service.stop)
