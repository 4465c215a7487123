"""Evaluation: held-out episodes on the current weights, never trained on.

The training reward is a noisy view of the policy: sampled at the training
temperature, from weights up to alpha versions old, on fresh random prompts
every step. Every `eval.every` steps (and after the last) the run plays
`eval.episodes` episodes per task on the *same* seeds each time, at
`eval.temperature` (greedy by default), once the step's weights are loaded,
and logs `eval/<task>/mean`, `eval/<task>/success` and `eval/<task>/turns`
with that step. The rollout workers play them beside their training
episodes (same engines, envs and reward functions), so an evaluation costs
its episodes' time and no start-up.

Training draws its seeds at random from [0, 2^31); eval seeds start at
`eval.seed` (1e9), so a collision is as likely as any two training prompts
being the same.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from roll_agentic.config import EvalConfig, TaskConfig


def evaluation_due(cfg: EvalConfig, step: int, total_steps: int) -> bool:
    """After `step` (1-based), is an evaluation due?"""
    return cfg.every > 0 and (step % cfg.every == 0 or step == total_steps)


def eval_seeds(cfg: EvalConfig) -> list[int]:
    return list(range(cfg.seed, cfg.seed + cfg.episodes))


def split_seeds(seeds: list[int], n_workers: int) -> list[list[int]]:
    """Seeds dealt round robin to `n_workers`: one list per worker, empty where seeds ran out."""
    return [seeds[i::n_workers] for i in range(n_workers)]


def summarize(task: str, outcomes: list[dict[str, Any]]) -> dict[str, float]:
    """One task's metrics from its episodes' outcomes (`RolloutWorker.evaluate`).

    An episode that failed (env, engine or reward) is counted in
    `eval/<task>/failed` and left out of the means rather than scored 0.
    """
    ok = [o for o in outcomes if o["status"] == "ok" and o["reward"] is not None]
    k = f"eval/{task}"
    m = {f"{k}/episodes": float(len(ok)), f"{k}/failed": float(len(outcomes) - len(ok))}
    if ok:
        m[f"{k}/mean"] = statistics.fmean(float(o["reward"]) for o in ok)
        m[f"{k}/success"] = statistics.fmean(float(o["success"]) for o in ok)
        m[f"{k}/turns"] = statistics.fmean(float(o["turns"]) for o in ok)
    return m


class Evaluation:
    """One evaluation's episodes, asked of the rollout workers: `metrics` sums up their answers.

    Split from `run_evaluation` so that a caller on an event loop (the
    multiplexer's job runner, `mux/job_runner.py`) awaits the calls instead of
    blocking its loop in `ray.get`; both sum up the same way.
    """

    def __init__(self, workers: list, tasks: list[TaskConfig], cfg: EvalConfig) -> None:
        """Asks every task's eval episodes of `workers` (Ray actors), all at once."""
        self.t0 = time.perf_counter()
        self.task_names = [t.name for t in tasks]
        seeds = eval_seeds(cfg)
        self.calls: list[tuple[str, Any]] = []  # (task, the ObjectRef of a RolloutWorker.evaluate call)
        for task in tasks:
            for worker, part in zip(workers, split_seeds(seeds, len(workers)), strict=True):
                if part:
                    self.calls.append((task.name, worker.evaluate.remote(task.name, part, cfg.temperature)))

    @property
    def refs(self) -> list:
        return [ref for _, ref in self.calls]

    def metrics(self, results: list[list[dict[str, Any]]]) -> dict[str, float]:
        """Every task's metrics from the calls' answers (`results`, in the order of `refs`)."""
        by_task: dict[str, list[dict[str, Any]]] = {name: [] for name in self.task_names}
        for (task_name, _), outcomes in zip(self.calls, results, strict=True):
            by_task[task_name].extend(outcomes)
        m: dict[str, float] = {}
        for task_name, outcomes in by_task.items():
            m.update(summarize(task_name, outcomes))
        m["time/eval_s"] = time.perf_counter() - self.t0
        return m


def run_evaluation(workers: list, tasks: list[TaskConfig], cfg: EvalConfig) -> dict[str, float]:
    """Every task's eval episodes over the rollout `workers` (Ray actors), all at once: their metrics."""
    import ray

    evaluation = Evaluation(workers, tasks, cfg)
    return evaluation.metrics(ray.get(evaluation.refs))
