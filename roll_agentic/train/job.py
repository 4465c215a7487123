"""One training job, phase by phase: rollout -> train -> weight sync.

`TrainingJob.run()` is what `roll-agentic train` does. The phases are
separate methods so that the multiplexer (roll_agentic/mux) can interleave
the phases of several jobs on shared pools.
"""

from __future__ import annotations

import math
import os
import time

import ray

from roll_agentic.config import Config, effective_pools
from roll_agentic.config_check import validate
from roll_agentic.engine.pool_stats import collect_engine_stats
from roll_agentic.rollout.buffer import RolloutFailing
from roll_agentic.train.evaluation import evaluation_due, run_evaluation
from roll_agentic.train.job_lifecycle import ENGINE_SEED_STRIDE, JobLifecycle
from roll_agentic.train.job_setup import remove_unstarted_dir, resolve_run_dir
from roll_agentic.train.rollout_wait import EVERY_S, RolloutWaitReporter
from roll_agentic.train.run_lock import RunDirLock
from roll_agentic.train.step_guard import StepGuard
from roll_agentic.train.step_metrics import rollout_metrics
from roll_agentic.train.stop_checkpoint import StopCheckpoint, TrainedStep
from roll_agentic.train.termination import SigtermAsInterrupt, Terminated
from roll_agentic.train.trainer import samples_from_groups

__all__ = ["ENGINE_SEED_STRIDE", "STREAM_FROM", "TrainingJob", "train"]

STREAM_FROM = 0.2  # start streaming gradients once this share of a round's groups is done


class TrainingJob(JobLifecycle, StopCheckpoint):
    """One run: start-up, resume and close (`JobLifecycle`), the phases of a step and the
    loop of steps (here), and what a stop saves (`StopCheckpoint`)."""

    def __init__(self, cfg: Config):
        self.cfg = validate(cfg)
        self.run_dir = resolve_run_dir(cfg)
        self.run_name = self.run_dir.name
        self.model_path = ""
        self.version = 0
        self.started_ray = False
        self.reward_service = None
        self.reward_endpoint = ""
        self.engines: list = []
        self.engine_pools: list[str] = []
        self.workers: list = []
        self.worker_runs: list = []
        self._last_engine_stats: list[dict] = []
        self.guard = StepGuard()  # Ctrl-C never leaves a half-done step in a checkpoint
        self._unfinished = TrainedStep()  # what a step with a whole update has left: `_finish_trained_step`
        self.term = SigtermAsInterrupt()  # installed by `run`, from the start of start-up
        self.lock = RunDirLock(self.run_dir)

    # -- phases ------------------------------------------------------------------------------
    def rollout_phase(self) -> list:
        return self._await_rollout(self.buffer.get_batch.remote(self.cfg.algo.groups_per_step, self.version))

    def _await_rollout(self, ref: ray.ObjectRef):
        """ray.get(ref), unless a rollout worker stops first: then that worker's error.

        A worker's `run()` ends only with the run, or with an error (its actor died, a
        bug). Its episodes never come back then, so the buffer's quota stays taken and
        get_batch waited forever, silently. The run stops instead, naming the worker.
        """
        waiting = RolloutWaitReporter(self.version + 1, self.cfg.algo.groups_per_step,
                                      lambda: ray.get(self.buffer.wait_status.remote()))
        waiting.started()
        while not (ready := ray.wait([ref, *self.worker_runs], num_returns=1, timeout=EVERY_S / 3)[0]):
            waiting.tick()  # a line now and then, should the wait be long or episodes fail
        if ref in ready:
            try:
                return ray.get(ref)
            except RolloutFailing as err:  # the buffer gave up: its message, not Ray's traceback around it
                raise getattr(err, "cause", err) from None
        stopped = ready[0]
        try:
            ray.get(stopped)
            why = "its run() returned"
        except Exception as err:  # noqa: BLE001 - reported, with the worker named
            why = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        raise RuntimeError(
            f"rollout worker {self.worker_runs.index(stopped)} stopped during the rollout ({why}); its "
            f"episodes cannot come back, so the run stops here. Resume it from its last checkpoint with "
            f"trainer.resume=true run_name={self.run_name}"
        )

    def train_phase(self, groups: list) -> dict[str, float]:
        samples = samples_from_groups(groups, self.cfg.algo.adv_eps, self.cfg.algo.advantage)
        return self.trainer.train_step(samples)

    def sync_phase(self) -> dict[str, float]:
        """Publishes the version `_update_done` counted, then opens the next step's rollout."""
        m = self.publisher.publish(self.version, self.trainer.engine_state_dict())
        ray.get(self.buffer.advance.remote(self.version))
        self._unfinished.advance = None
        return m

    def stream_phase(self) -> tuple[list, dict[str, float]]:
        """Tail batching's rollout with streamed gradients (RollPacker's stream trainer).

        Once STREAM_FROM of the round's groups are complete, gradients of the
        finished groups are computed while the rest still generate; the single
        optimizer step waits for the whole round, so the update is the same
        as computing it after the round (no sample is off-policy). Gradients
        change no weight: only the step's end (`_apply_streamed`) does.
        """
        p0 = self.cfg.algo.groups_per_step
        groups: list = []
        held: list = []
        streamed_s = 0.0
        closed = False
        # Until the round closes: P0 groups, or more in a long round filled with other tasks' prompts.
        while not closed:
            new, closed = self._await_rollout(self.buffer.take_ready.remote(self.version))
            if not new and not closed:
                raise RuntimeError("the trajectory buffer stopped in the middle of a round")
            groups += new
            held += new
            if len(groups) >= math.ceil(STREAM_FROM * p0) and not closed:
                t = time.perf_counter()
                self.trainer.accumulate(samples_from_groups(held, self.cfg.algo.adv_eps, self.cfg.algo.advantage))
                streamed_s += time.perf_counter() - t
                held = []
        rollout_done = time.perf_counter()
        if held:
            self.trainer.accumulate(samples_from_groups(held, self.cfg.algo.adv_eps, self.cfg.algo.advantage))
        return groups, {"tail/streamed_grad_s": streamed_s, "tail/round_closed": float(closed),
                        "tail/final_grad_s": time.perf_counter() - rollout_done}

    def _apply_streamed(self, m: dict[str, float]) -> dict[str, float]:
        m.update(self.trainer.apply())  # its lr is that of self.trainer.step, the step being taken
        self.trainer.step += 1
        return m

    def step_once(self, hold_until_logged: bool = False) -> dict[str, float]:
        """One whole step. A Ctrl-C during its update is held to the step's end, or, with
        `hold_until_logged` (run()), until the caller has logged it and calls `guard.end()`."""
        try:
            m = self._step(hold_until_logged)
        except BaseException:
            if not hold_until_logged:  # run() reads `guard.torn` first, then lets go itself
                self.guard.abandon()
            raise
        return m

    def _step(self, hold_until_logged: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        if self.cfg.rollout.mode == "tail_batching":
            groups, train_m = self.stream_phase()
            t1 = time.perf_counter() - train_m["tail/final_grad_s"]
            self.guard.begin()  # ended by run() once the step is logged
            train_m = self._apply_streamed(train_m)
            self._update_done(train_m)
            t2 = time.perf_counter()
            sync_m = self.sync_phase()
        else:
            groups = self.rollout_phase()
            t1 = time.perf_counter()
            self.guard.begin()
            train_m = self.train_phase(groups)
            self._update_done(train_m)
            t2 = time.perf_counter()
            sync_m = self.sync_phase()
        t3 = time.perf_counter()
        engine_stats = collect_engine_stats(self.engines, self._last_engine_stats, self.engine_pools)
        self.router.observe.remote(engine_stats)  # phase-aware routing learns each task's reply length
        worker_stats = ray.get([w.stats.remote() for w in self.workers])
        buffer_m = ray.get(self.buffer.metrics.remote())
        m = rollout_metrics(groups, self.version - 1, engine_stats, self._last_engine_stats,
                            worker_stats, t3 - t0, routing=ray.get(self.router.snapshot.remote()),
                            prices={p.name: p.price_per_hour for p in effective_pools(self.cfg)})
        self._last_engine_stats = engine_stats
        m.update(train_m)
        m.update(sync_m)
        m.update(buffer_m)
        m.update({"step": float(self.version), "time/step_s": t3 - t0, "time/rollout_wait_s": t1 - t0,
                  "time/train_s": t2 - t1, "time/sync_s": t3 - t2})
        self._unfinished.row = m  # the whole step's row now, should run() stop before logging it
        if not hold_until_logged:
            self.guard.end()
        return m

    # -- the whole run ------------------------------------------------------------------------
    def run(self) -> dict:
        from roll_agentic.telemetry.metrics import MetricsLog
        from roll_agentic.telemetry.plots import pool_busy, reward_curve
        from roll_agentic.telemetry.progress import ProgressDisplay

        cfg = self.cfg
        print(f"run dir: {self.run_dir}", flush=True)
        done = self._resume_step()
        if done >= cfg.trainer.total_steps > 0 and cfg.trainer.resume:
            # Resuming a finished run started Ray, the engines and the trainer (a minute, more
            # with vLLM) to train nothing, said nothing, and left config.json naming a
            # total_steps the run had already passed.
            print(f"the run is at step {done} of trainer.total_steps={cfg.trainer.total_steps}: nothing to train "
                  f"(pass a larger trainer.total_steps to go on)", flush=True)
            rows = MetricsLog(self.run_dir, tensorboard=False).read()
            return {"run_dir": str(self.run_dir), "steps": done, "interrupted": False, "metrics": rows}
        # From here a SIGTERM (a scheduler's stop) is a Ctrl-C: while starting, it stops what
        # started and leaves no run folder; once training, it saves a checkpoint first.
        term = self.term.install()
        ray_was_up = ray.is_initialized()
        try:
            self.start()
        except BaseException as err:  # what did start (emulator, actors) stops too, whatever failed
            term.restore()
            self.close(graceful=False)
            if not ray_was_up and not self.started_ray and ray.is_initialized():
                ray.shutdown()  # stopped inside ray.init: its processes outlived the run
            if self.lock.taken:  # not another process's folder, which this one never held
                remove_unstarted_dir(self.run_dir, "run")
            if isinstance(err, KeyboardInterrupt) and term.received and not isinstance(err, Terminated):
                raise Terminated from None  # taken in a ray.get: said as the SIGTERM it was
            raise
        tasks = [t.name for t in cfg.tasks]
        interrupted = False
        log = None
        try:  # from here on every way out closes the run: a SIGTERM before the loop too
            self._say_what_resume_changed()
            self._save_config()
            log = MetricsLog(self.run_dir, cfg.telemetry.tensorboard)
            log.truncate_after(self.version)
            with ProgressDisplay(cfg.trainer.total_steps, tasks, cfg.telemetry.progress) as progress:
                while self.version < cfg.trainer.total_steps:
                    m = self.step_once(hold_until_logged=True)
                    if evaluation_due(cfg.eval, self.version, cfg.trainer.total_steps):
                        m.update(run_evaluation(self.workers, cfg.tasks, cfg.eval))  # on the weights just loaded
                    log.write(self.version, m)
                    self._unfinished.row = None
                    progress.update(m)
                    self.guard.end()  # the step is whole: a Ctrl-C held meanwhile stops the run here
                    if self.version % cfg.trainer.save_every == 0 or self.version == cfg.trainer.total_steps:
                        self.checkpoint()
        except KeyboardInterrupt:
            interrupted = True
            self._save_on_interrupt(term, log)
        except Exception:
            # An error between steps (a worker died, every group failing), or in a step after its
            # update (the sync, the evaluation): no update is half done, so the steps since the last
            # save are kept, as a Ctrl-C keeps them (they were lost: up to save_every - 1 steps, or
            # every step since the save when the sync failed, while the error said to resume).
            self._save_before_error(log)
            raise
        finally:
            # The guard first: it puts back the handler it replaced, `term`'s. Restored after
            # `term`, an error inside a step left SIGTERM raising Terminated after the run.
            self.guard.abandon()
            term.restore()
            rows = log.read() if log else []
            if log:
                log.close()
            if cfg.telemetry.plots and rows:
                reward_curve(rows, tasks, self.run_dir / "reward_curve.png")
                pool_busy(rows, [p.name for p in effective_pools(cfg)], self.run_dir / "pools.png")
            self.close()
        print(f"run dir: {self.run_dir}", flush=True)
        return {"run_dir": str(self.run_dir), "steps": self.version, "interrupted": interrupted,
                "terminated": interrupted and self._terminated(term), "metrics": rows}


def train(cfg: Config) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return TrainingJob(cfg).run()
