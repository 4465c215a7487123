"""One training job, phase by phase: rollout -> train -> weight sync.

`TrainingJob.run()` is what `roll-agentic train` does. The phases are
separate methods so that the multiplexer (roll_agentic/mux) can interleave
the phases of several jobs on shared pools.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import time
from dataclasses import asdict
from pathlib import Path

import ray

from roll_agentic.config import Config, effective_pools
from roll_agentic.config_check import validate
from roll_agentic.engine.pool_stats import collect_engine_stats
from roll_agentic.engine.router import Router, router_kwargs
from roll_agentic.rollout.buffer import RolloutFailing
from roll_agentic.train.checkpoint import (
    is_latest,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    write_atomic,
)
from roll_agentic.train.evaluation import evaluation_due, run_evaluation
from roll_agentic.train.job_setup import (
    check_before_start,
    make_trainer,
    new_buffer,
    remove_unstarted_dir,
    resolve_model_path,
    resolve_run_dir,
    spawn_engines,
    spawn_rollout_workers,
    start_ray,
    start_rewards,
)
from roll_agentic.train.resume_record import (
    config_json,
    flat_settings,
    keep_copy,
    lora_mismatch,
    saved_flat_config,
    schedule_change_line,
    task_mismatch,
)
from roll_agentic.train.rollout_wait import EVERY_S, RolloutWaitReporter
from roll_agentic.train.run_lock import RunDirLock
from roll_agentic.train.step_guard import StepGuard
from roll_agentic.train.step_metrics import rollout_metrics
from roll_agentic.train.termination import SigtermAsInterrupt, Terminated
from roll_agentic.train.trainer import samples_from_groups
from roll_agentic.train.weight_sync import WeightPublisher

STREAM_FROM = 0.2  # start streaming gradients once this share of a round's groups is done


ENGINE_SEED_STRIDE = 10_007  # engine seeds after a resume at step k: seed + stride * k + engine index


class TrainingJob:
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
        self._unfinished: dict = {}  # what a step with a whole update has left: `_finish_trained_step`
        self.term = SigtermAsInterrupt()  # installed by `run`, from the start of start-up
        self.lock = RunDirLock(self.run_dir)

    # -- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()  # before anything reads or writes the run's files
        self.model_path = resolve_model_path(cfg)
        check_before_start(cfg, self.model_path)
        self._check_resume_matches_run()
        self.started_ray = start_ray(cfg)
        self.term.renew()  # ray.init put its own SIGTERM handlers in
        self._start_rewards()
        # A resumed run samples from streams of its own: seeded as at step 0, the engines
        # replayed the run's first sampling noise.
        base_seed = cfg.trainer.seed + ENGINE_SEED_STRIDE * self._resume_step()
        self.engines, self.engine_pools = spawn_engines(cfg, self.model_path, base_seed, self.engines,
                                                        self.engine_pools)
        self.router = ray.remote(num_cpus=0)(Router).remote(**router_kwargs(cfg))
        self.buffer = new_buffer(cfg, self.run_dir)
        self.trainer = make_trainer(self.model_path, cfg)
        self.publisher = WeightPublisher(self.engines, self.run_name)
        self._maybe_resume()
        self.workers = spawn_rollout_workers(cfg, self.model_path, self.engines, self.router, self.buffer,
                                             self.reward_endpoint)
        self.worker_runs = [w.run.remote() for w in self.workers]
        self._last_engine_stats = collect_engine_stats(self.engines, None, self.engine_pools)

    def _start_rewards(self) -> None:
        self.reward_service, self.reward_endpoint = start_rewards(self.cfg, self.run_dir)

    def _check_resume_matches_run(self) -> None:
        """A resume with other LoRA settings or other tasks than the run's (unless
        trainer.resume_other_tasks) is refused before anything starts."""
        # Any checkpoint, step 0 too: a SIGTERM in the first rollout saves step 0 (untrained),
        # and a resume of it on other tasks dropped the saved prompts without a word.
        if self.cfg.trainer.resume and latest_checkpoint(self.run_dir / "checkpoints") is not None:
            before = saved_flat_config(self.run_dir)
            now = flat_settings(self.cfg)
            problem = before and (lora_mismatch(before, now) or (
                not self.cfg.trainer.resume_other_tasks and task_mismatch(before, now)))
            if problem:
                raise ValueError(problem)

    def _say_what_resume_changed(self) -> None:
        """A resume runs with this command line's settings: say where they differ from the run's.

        `trainer.resume=true run_name=X` alone resumed an `engine=hf
        trainer.total_steps=20` run on the default engine with 80 steps (and a
        learning-rate schedule stretched to them), silently.
        """
        before = saved_flat_config(self.run_dir) if self.cfg.trainer.resume else None
        if before is None:
            return
        saved = self.run_dir / "config.json"
        now = flat_settings(self.cfg)
        changed = [f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(before) | set(now))
                   # run_name: the saved config may hold "" (a fresh run named at its start)
                   if k not in ("trainer.resume", "run_name") and before.get(k) != now.get(k)]
        if changed:
            # One per line: on one line a changed task list ran hundreds of characters long.
            print(f"resuming with {len(changed)} setting(s) other than the run's (repeat the run's overrides "
                  "to keep them):\n" + "\n".join(f"  {c}" for c in changed), flush=True)
            keep_copy(self.run_dir, f"config.before_step_{self.version}", saved.read_text())

    def _save_config(self) -> None:
        """The run's settings into its config.json, atomically: written in place (truncated, then
        written), a kill or a full disk left it empty, and a resume's checks that read it
        (`_say_what_resume_changed`, the schedule line) were then silently skipped."""
        write_atomic(self.run_dir / "config.json", config_json(asdict(self.cfg)).encode())

    def _resume_step(self) -> int:
        """The step a resume starts from (0 for a fresh run)."""
        ckpt = latest_checkpoint(self.run_dir / "checkpoints") if self.cfg.trainer.resume else None
        return int(ckpt.name.rsplit("_", 1)[-1]) if ckpt is not None else 0

    def _maybe_resume(self) -> None:
        if not self.cfg.trainer.resume:
            return
        ckpt = latest_checkpoint(self.run_dir / "checkpoints")
        if ckpt is None:
            raise FileNotFoundError(f"trainer.resume=true but {self.run_dir}/checkpoints has no complete checkpoint")
        weights, trainer_state, run_state = load_checkpoint(ckpt)
        self.trainer.load_state(trainer_state, weights)
        ray.get(self.buffer.import_state.remote(run_state["buffer"]))
        self.version = int(run_state["step"])
        self.publisher.publish(self.version, self.trainer.engine_state_dict())
        print(f"resumed from {ckpt} at step {self.version}", flush=True)
        self._say_what_the_schedule_does()

    def _say_what_the_schedule_does(self) -> None:
        """A resume with another trainer.total_steps stretches (or squeezes) the decaying
        learning-rate schedule: the next step's rate jumps. Allowed (extending a run is common),
        but said, in one line; the run's saved config.json is read before it is replaced."""
        saved = self.run_dir / "config.json"
        if not saved.is_file():
            return
        try:
            before = json.loads(saved.read_text()).get("trainer", {})
        except (OSError, ValueError, AttributeError):
            return
        line = schedule_change_line(before, self.cfg.trainer, self.version)
        if line:
            print(line, flush=True)

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

    def _update_done(self, train_m: dict[str, float]) -> None:
        """The update is whole (every optimizer step taken, trainer.step counted): the step counts
        as trained from here, unpublished yet. An error from here on saves it (StepGuard's doc)."""
        self.version += 1
        self._unfinished = {"advance": self.version, "row": dict(train_m)}
        self.guard.update_done()

    def sync_phase(self) -> dict[str, float]:
        """Publishes the version `_update_done` counted, then opens the next step's rollout."""
        m = self.publisher.publish(self.version, self.trainer.engine_state_dict())
        ray.get(self.buffer.advance.remote(self.version))
        self._unfinished.pop("advance", None)
        return m

    def _finish_trained_step(self, log=None) -> None:
        """What a step stopped after its whole update (an engine refused the weights, a worker died)
        lacks to be saved as trained. The buffer's advance: one still counting the step's groups as
        handed out re-rolled them on resume, one step behind (staleness, quota). Not the engines: a
        resume publishes the checkpoint's weights to its fresh ones (`_maybe_resume`). Raises if the
        buffer is gone: nothing is saved then, the last checkpoint stands."""
        if "advance" in self._unfinished:
            ray.get(self.buffer.advance.remote(self._unfinished["advance"]))
            del self._unfinished["advance"]
        if log is not None and "row" in self._unfinished:  # its row, or the log had a gap there
            log.write(self.version, self._unfinished.pop("row"))

    def checkpoint(self, untrained: bool = False) -> Path:
        """Saves the run. `untrained`: the groups the buffer handed out since its last
        advance were not trained (the step stopped before its update): it keeps them."""
        state = ray.get(self.buffer.export_state.remote(untrained))
        # model_path: the model it trained from, resolved (`model export` writes its config and tokenizer)
        run_state = {"buffer": state, "run_name": self.run_name, "model_path": self.model_path}
        return save_checkpoint(self.run_dir / "checkpoints", self.version, self.trainer.engine_state_dict(),
                               self.trainer.state(), run_state, keep=self.cfg.trainer.keep_checkpoints)

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
        self._unfinished["row"] = m  # the whole step's row now, should run() stop before logging it
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
                    self._unfinished.pop("row", None)
                    progress.update(m)
                    self.guard.end()  # the step is whole: a Ctrl-C held meanwhile stops the run here
                    if self.version % cfg.trainer.save_every == 0 or self.version == cfg.trainer.total_steps:
                        self.checkpoint()
        except KeyboardInterrupt:
            interrupted = True
            torn, trained = self.guard.torn, self.guard.active  # active, not torn: its update is whole
            self.guard.abandon()
            cause = "terminated (SIGTERM)" if self._terminated(term) else "interrupted"
            if torn:
                print(f"\nstopped in the middle of step {self.version + 1}: nothing saved, the last "
                      "checkpoint stands", flush=True)
            else:
                print(f"\n{cause}: saving a checkpoint before stopping ...", flush=True)
                # Not torn: no step is half done. One whose update had not begun took groups
                # (a streamed round's so far, or its batch) that trained nothing: saved as not
                # taken, or a resume never ran their prompts (a whole step's advance emptied the
                # list). Their streamed gradients are in no weight or optimizer state saved.
                # One whose update is whole (`trained`: a KeyboardInterrupt not the guard's
                # second) is first counted as trained, its buffer advanced.
                try:
                    if trained:
                        self._finish_trained_step(log)
                    print(f"checkpoint: {self.checkpoint(untrained=True)}", flush=True)
                except Exception as err:  # a full disk, a dead buffer actor: said, with what a resume has
                    last = latest_checkpoint(self.run_dir / "checkpoints")
                    stands = (f"the last checkpoint, {last.name}, stands: a resume repeats the steps after it"
                              if last else "no checkpoint stands: a resume starts over")
                    print(f"checkpoint failed ({type(err).__name__}: {err}): {stands}", flush=True)
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

    def _save_before_error(self, log=None) -> None:
        """A checkpoint of the steps trained since the last one, unless a step's update is half
        done. One whose update is whole (the error came in its sync, its evaluation) is saved
        as trained: the trainer's state is that step's, whole (StepGuard's doc)."""
        if self.guard.torn or self.version == 0:  # half done, or nothing trained yet
            return
        if is_latest(self.run_dir / "checkpoints", self.version):
            return  # nothing trained since
        try:
            if self.guard.active:  # not torn: the step's update is whole
                self._finish_trained_step(log)
            print(f"saving a checkpoint before stopping on the error: {self.checkpoint(untrained=True)}",
                  flush=True)
        except Exception as err:  # noqa: BLE001 - the run's own error is the one to raise
            print(f"checkpoint failed too ({type(err).__name__}: {err})", flush=True)

    def _terminated(self, term: SigtermAsInterrupt) -> bool:
        """Was it a SIGTERM that stopped the run (taken between steps, or held by a step)?"""
        return term.received or signal.SIGTERM in self.guard.received

    def close(self, graceful: bool = True) -> None:
        """Stops everything the run started. Not `graceful` (start-up failed or was
        interrupted): actors are killed without waiting on them, some may still be starting."""
        if graceful:
            with contextlib.suppress(Exception):
                ray.get(self.buffer.stop.remote(), timeout=10)
            for w in self.workers:
                with contextlib.suppress(Exception):
                    ray.get(w.stop.remote(), timeout=10)
            with contextlib.suppress(Exception):
                ray.get([e.shutdown.remote() for e in self.engines], timeout=30)
        if hasattr(self, "trainer") and hasattr(self.trainer, "close"):
            with contextlib.suppress(Exception):
                self.trainer.close()
        for a in self.workers + self.engines:
            with contextlib.suppress(Exception):
                ray.kill(a)
        with contextlib.suppress(Exception):
            self.publisher.close()
        self.lock.release()
        if self.reward_service is not None:
            with contextlib.suppress(Exception):
                self.reward_service.stop()
        if self.started_ray:
            ray.shutdown()


def train(cfg: Config) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return TrainingJob(cfg).run()
