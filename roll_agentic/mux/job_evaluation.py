"""A multiplexed job's held-out evaluation, on the weights of the step it scores.

Evaluation (`eval.every`, `train/evaluation.py`) runs on the terms of every
rollout phase (`job_runner.py`): under the job's rollout permit, its own
weights loaded. A solo run evaluates step N on the weights step N produced;
here those weights reach the engines only in the job's next rollout phase,
so step N's metrics row is held back (`JobRunner.sync`) and logged once that
phase has loaded them and played the eval episodes, after its own batch and
before it drains, each eval episode checked to start on version N.
Evaluating in step N's own rollout phase instead would score the weights
step N trained *from*. The last step has no next rollout phase: it takes a
phase of its own for its evaluation (`evaluate_last`, kind "eval" on the
board). The evaluation's time is rollout-node time held by the job: it is
in the board's intervals (busy fractions, Gantt), the step ends (iteration
times, slowdown) and the phase's `time/rollout_wait_s`; the probe's profile
leaves it out (`JobRunner.probe`). `JobRunner` mixes this in.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import ray

from roll_agentic.config import Config
from roll_agentic.mux.job_state import JobRecord
from roll_agentic.mux.phase_waits import JobFailed, await_batch, drain, rollout_limit
from roll_agentic.train.evaluation import Evaluation


class HeldEvaluation:
    """The held row of a step whose evaluation is due, and the evaluation that logs it."""

    cfg: Config
    record: JobRecord
    version: int
    workers: list
    worker_runs: list
    worker_engines: list[str]
    phase_timeout_s: float
    _log: object
    # (step, metrics) of a step whose evaluation is due: logged once it has run on the
    # step's weights (`_evaluate_held_row`), in the next rollout phase or `evaluate_last`.
    _held_row: tuple[int, dict[str, float]] | None

    def _engines(self, nodes: list[str]) -> list:
        raise NotImplementedError

    def _hold(self, kind: str, nodes: list[str]):
        raise NotImplementedError

    async def _load_weights(self, engines: list) -> None:
        raise NotImplementedError

    def _kill_workers(self) -> None:
        raise NotImplementedError

    def _weights_path(self, version: int) -> str:
        raise NotImplementedError

    async def _evaluate_held_row(self) -> float:
        """The held step's eval episodes on the weights the engines serve now -- that step's,
        under the job's rollout permit -- then its row logged with their metrics; their seconds."""
        assert self._held_row is not None
        step, row = self._held_row
        if step != self.version:
            raise JobFailed(f"step {step}'s evaluation found the engines on version {self.version}")
        evaluation = Evaluation(self.workers, self.cfg.tasks, self.cfg.eval)
        try:
            # Limited like a batch: a wedged evaluation must not hold the node for ever.
            results = await await_batch(asyncio.gather(*evaluation.refs), self.worker_runs, self.phase_timeout_s)
        except ray.exceptions.RayError as err:
            raise JobFailed(f"a rollout worker stopped mid-evaluation: {type(err).__name__}") from err
        bad = {o["version"] for r in results for o in r if o["status"] == "ok"} - {step}
        if bad:
            raise JobFailed(f"isolation check: eval episodes served by weight versions {sorted(bad)}, expected {step}")
        m = evaluation.metrics(results)
        self._held_row = None
        await asyncio.to_thread(self._log.write, step, {**row, **m})
        return m["time/eval_s"]

    async def evaluate_last(self) -> None:
        """The last step's evaluation (due whatever eval.every says), if held: no rollout phase
        follows it, so it takes one of its own on its workers' nodes -- the permit, its weights
        loaded, the engines drained before and after -- shown as kind "eval" on the board."""
        if self._held_row is None:
            return
        nodes = self.worker_engines
        if not nodes:  # no workers to play it (cannot happen after a step): the row without it
            await asyncio.to_thread(self._log.write, *self._held_row)
            self._held_row = None
            return
        engines = self._engines(nodes)
        self.record.phase = "waiting eval"
        async with self._hold("eval", nodes):
            self.record.phase = "eval"
            # The whole held phase has a limit, as a rollout phase's: a weight load or a drain
            # that never answers must not hold the nodes for ever (the episodes have their own).
            async with rollout_limit("eval", self.phase_timeout_s, nodes):
                try:
                    await drain(engines)
                    await self._load_weights(engines)
                    await self._evaluate_held_row()
                    await drain(engines)
                except BaseException:
                    self._kill_workers()
                    with contextlib.suppress(Exception):
                        await drain(engines, timeout_s=60.0)
                    raise
        Path(self._weights_path(self.version)).unlink(missing_ok=True)
