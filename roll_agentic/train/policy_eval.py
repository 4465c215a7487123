"""`roll-agentic eval`: a policy's held-out episodes, with no training.

Did the run help? A run's `eval.every` answers on its own weights as it
goes; this answers for any model directory (`model.path`: a base model,
a policy `roll-agentic model export` wrote, or a run or checkpoint, which is
exported into the eval's directory first), so two of them can be
compared on the same footing: the same tasks, the same eval seeds
(`eval.seed`, `eval.episodes` per task), the same temperature
(`eval.temperature`, greedy by default), the same engines, envs and reward
functions as training uses (`train/evaluation.py`). Each command line is
one evaluation; its results go to `<output_dir>/<run_name or eval-TIME>/eval.json`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from dataclasses import replace
from pathlib import Path

import ray

from roll_agentic.config import Config
from roll_agentic.config_check import validate
from roll_agentic.engine.router import Router, router_kwargs
from roll_agentic.train.evaluation import run_evaluation
from roll_agentic.train.job_setup import (
    check_before_start,
    new_buffer,
    not_a_model,
    remove_unstarted_dir,
    resolve_model_path,
    spawn_engines,
    spawn_rollout_workers,
    start_ray,
    start_rewards,
)
from roll_agentic.train.termination import SigtermAsInterrupt, Terminated

FIGURES = ("mean", "success", "turns", "episodes", "failed")


def evaluate_policy(cfg: Config) -> dict:
    """Plays every task's eval episodes on `model.path` and returns what `eval.json` holds."""
    cfg = validate(cfg)
    run_dir = _eval_dir(cfg)
    _say_if_other_tasks(cfg)
    checkpoint, exported = _exported_for_eval(cfg, run_dir)
    if exported:
        cfg = replace(cfg, model=replace(cfg.model, path=exported))
    model_path = resolve_model_path(cfg)
    check_before_start(cfg, model_path)
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"eval dir: {run_dir}", flush=True)
    # A SIGTERM (a scheduler's stop) ends it the way Ctrl-C does: what started stops, Ray too.
    # Ray's own handler, put in by ray.init, aborted with a stack dump and left its processes.
    term = SigtermAsInterrupt().install()
    ray_was_up = ray.is_initialized()
    started, service, engines, actors, metrics = False, None, [], [], None
    try:
        started = start_ray(cfg)
        term.renew()  # ray.init put its own SIGTERM handlers in
        service, endpoint = start_rewards(cfg, run_dir)
        spawn_engines(cfg, model_path, cfg.trainer.seed, engines)
        router = ray.remote(num_cpus=0)(Router).remote(**router_kwargs(cfg))
        buffer = new_buffer(cfg, run_dir)  # the workers' handle; no training episode is asked of them
        actors += [router, buffer]
        workers = spawn_rollout_workers(cfg, model_path, engines, router, buffer, endpoint)
        actors += workers
        metrics = run_evaluation(workers, cfg.tasks, cfg.eval)
    except KeyboardInterrupt as err:
        if term.received and not isinstance(err, Terminated):
            raise Terminated from None  # taken in a ray.get: said as the SIGTERM it was
        raise
    finally:
        term.restore()
        for a in actors + engines:
            with contextlib.suppress(Exception):
                ray.kill(a)
        if service is not None:
            with contextlib.suppress(Exception):
                service.stop()
        if started or (not ray_was_up and ray.is_initialized()):  # or stopped inside ray.init
            ray.shutdown()
        if metrics is None:
            remove_unstarted_dir(run_dir, "eval")
    result = {
        "model": model_path,
        "checkpoint": checkpoint,
        "episodes_per_task": cfg.eval.episodes,
        "temperature": cfg.eval.temperature,
        "first_seed": cfg.eval.seed,
        "tasks": {t.name: {f: metrics.get(f"eval/{t.name}/{f}") for f in FIGURES} for t in cfg.tasks},
        "eval_s": round(metrics["time/eval_s"], 2),
        "run_dir": str(run_dir),
    }
    (run_dir / "eval.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def _eval_dir(cfg: Config) -> Path:
    """`<output_dir>/<run_name or eval-TIME>`, never a training run's folder: a run yaml's
    `run_name`, passed again to evaluate that run, put eval.json and the exported policy
    in the run itself, where the run's own `model export ... policy` line then failed."""
    fresh = Path(cfg.output_dir) / f"eval-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if not cfg.run_name:
        return fresh
    named = Path(cfg.output_dir) / cfg.run_name
    if (named / "checkpoints").is_dir():
        print(f"{named} is a training run's folder: this evaluation goes to {fresh}", flush=True)
        return fresh
    return named


def _say_if_other_tasks(cfg: Config) -> None:
    """A warning when `model.path` is a run (or one of its checkpoints) that trained other
    tasks than the ones this evaluation plays: without the run's --config, eval played
    the default tasks and nothing said so."""
    from roll_agentic.train.resume_record import flat_settings, saved_flat_config, task_names

    source = Path(cfg.model.path) if cfg.model.path else None
    if source is None:
        return
    run = source if (source / "checkpoints").is_dir() else source.parent.parent
    saved = saved_flat_config(run) if (run / "checkpoints").is_dir() else None
    trained, played = task_names(saved or {}), task_names(flat_settings(cfg))
    if trained and sorted(trained) != sorted(played):
        print(f"warning: {run} trained tasks {', '.join(trained)}; this evaluation plays {', '.join(played)} "
              "(pass the run's --config FILE and task overrides to evaluate its own)", flush=True)


def _exported_for_eval(cfg: Config, run_dir: Path) -> tuple[str, str]:
    """A `model.path` naming a run (its newest checkpoint) or one checkpoint is exported into
    the eval's directory (`model export`): (the checkpoint, the model written), or ("", "")
    when `model.path` is a model already, or nothing `resolve_model_path` would not refuse."""
    from roll_agentic.model.export import WEIGHTS, export_checkpoint

    source = Path(cfg.model.path) if cfg.model.path else None
    if source is None or not not_a_model(source):
        return "", ""
    if not ((source / WEIGHTS).is_file() or (source / "checkpoints").is_dir()):
        return "", ""
    done = export_checkpoint(source, run_dir / "policy")
    print(f"exported {done.checkpoint} to {done.out} for this evaluation", flush=True)
    return str(done.checkpoint), str(done.out)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def eval_table(result: dict) -> list[str]:
    """`evaluate_policy`'s result as a reader takes it in: one line per task."""
    model = f"{result['checkpoint']} (as {result['model']})" if result.get("checkpoint") else result["model"]
    lines = [f"{model}: {result['episodes_per_task']} episodes per task from seed {result['first_seed']}, "
             f"temperature {result['temperature']:g}, {result['eval_s']} s",
             f"  {'task':<16}{'mean':>9}{'success':>9}{'turns':>7}{'failed':>8}"]
    for name, m in result["tasks"].items():
        lines.append(f"  {name:<16}{_fmt(m['mean'], '9.3f')}{_fmt(m['success'], '9.3f')}{_fmt(m['turns'], '7.2f')}"
                     f"{_fmt(m['failed'], '8.0f')}")
    return lines
