"""A training job's start-up (with its resume) and its close.

`JobLifecycle` is a mixin of `TrainingJob` (roll_agentic/train/job.py): it starts what a
run needs (Ray, the reward service, engines, router, buffer, trainer, rollout workers),
resumes from the run's last checkpoint, says what a resume changes, and stops it all again.
The pieces themselves are built in roll_agentic/train/job_setup.py.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict

import ray

from roll_agentic.engine.pool_stats import collect_engine_stats
from roll_agentic.engine.router import Router, router_kwargs
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, write_atomic
from roll_agentic.train.job_setup import (
    check_before_start,
    make_trainer,
    new_buffer,
    resolve_model_path,
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
from roll_agentic.train.weight_sync import WeightPublisher

ENGINE_SEED_STRIDE = 10_007  # engine seeds after a resume at step k: seed + stride * k + engine index


class JobLifecycle:
    """Start-up, resume and close of a `TrainingJob` (whose `__init__` sets the attributes used)."""

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

    # -- the end ------------------------------------------------------------------------------
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
