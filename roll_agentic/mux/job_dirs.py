"""The folder under a run's jobs/ that a submitted job runs in, and its config there.

A name submitted again (or a run directory used again) gets a folder of its
own, <name>-2, <name>-3, ...: in the earlier one's, the trainer found that
run's checkpoint and resumed it against engines serving the initial weights.

A resumed job (`mux run --resume`, `mux submit --resume`) goes on in the
folder holding its newest complete checkpoint, which need not be <name>: a
job stopped before its first checkpoint ran again in <name>-2, and the next
resume looked in <name> only, found nothing and started over in <name>-3.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from roll_agentic.config import Config, ConfigError
from roll_agentic.config_check import validate
from roll_agentic.mux.job_engine_config import pool_problem
from roll_agentic.mux.rollback_mark import checkpoint_step
from roll_agentic.train.checkpoint import latest_checkpoint
from roll_agentic.train.run_lock import free_name


def _runs_of(jobs: Path, name: str) -> list[Path]:
    """<name> and the <name>-N folders it was given when submitted again."""
    again = re.compile(rf"{re.escape(name)}-\d+")
    found = [p for p in jobs.iterdir() if p.is_dir() and again.fullmatch(p.name)] if jobs.is_dir() else []
    return [jobs / name, *found]


def job_folder(jobs: Path, name: str, resume: bool) -> tuple[str, bool]:
    """(the folder's name under `jobs`, whether the job resumes from a checkpoint there)."""
    if resume:
        # Newest by step, then by the checkpoint's time: a name submitted afresh after a stop
        # trained in its own folder, and a later stop there may have fewer steps than the first.
        saved = []
        for run in _runs_of(jobs, name):
            ckpt = latest_checkpoint(run / "checkpoints")
            if ckpt is not None:
                saved.append((checkpoint_step(ckpt), ckpt.stat().st_mtime, run.name))
        if saved:
            return max(saved)[2], True
    return free_name(jobs, name), False


def job_config(cfg: Config, jobs: Path, name: str, engines: int, resume: bool = False) -> Config:
    """`cfg` for a job run by the multiplexer: its folder (`job_folder`), the pool's engines.

    ConfigError for a job that sets pools of its own: `mux run` and `mux submit` refuse it
    where they load it (job_engine_config.py); this is for a config that did not pass there."""
    problem = pool_problem(cfg)
    if problem:
        raise ConfigError(f"job {name}: {problem}")
    cfg = copy.deepcopy(cfg)
    cfg.run_name, cfg.trainer.resume = job_folder(jobs, name, resume)
    cfg.output_dir = str(jobs)
    cfg.telemetry.progress = False
    # The job's engines are the pool's: one routing pool spanning the node's engines (a job's
    # own pools are refused above), sized to them.
    cfg.pools, cfg.engine.num_engines = [], engines
    for t in cfg.tasks:
        t.pool = "default"
    return validate(cfg)
