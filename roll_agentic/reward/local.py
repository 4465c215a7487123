"""Rewards computed in this process: `rewards.<function>.reward(summary)` off the event loop.

Bounded concurrency, same outcome type as the serverless client; a raised
exception, a non-numeric result or a call past `timeout_s` is ok=False with
the reason, never a 0 (a hung reward would otherwise hold its group forever).
"""

from __future__ import annotations

import asyncio
import importlib
import time
from types import ModuleType

from roll_agentic import faults
from roll_agentic.elastic_executor import ElasticExecutor
from roll_agentic.reward.outcome import RewardOutcome, parse_reward


class LocalRewardClient:
    def __init__(self, max_concurrency: int = 16, package: str = "rewards", timeout_s: float | None = None) -> None:
        self.package = package
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._sem = asyncio.Semaphore(max_concurrency)
        self._pool: ElasticExecutor | None = None  # made in the event loop of the first call
        self._modules: dict[str, ModuleType] = {}

    def _module(self, function: str) -> tuple[ModuleType, bool]:
        mod = self._modules.get(function)
        if mod is not None:
            return mod, False
        mod = importlib.import_module(f"{self.package}.{function}")
        if not callable(getattr(mod, "reward", None)):
            raise AttributeError(f"{self.package}.{function} has no function `reward(summary)`")
        self._modules[function] = mod
        return mod, True

    async def score(self, function: str, summary: dict) -> RewardOutcome:
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        async with self._sem:
            try:
                mod, first = self._module(function)
                t_run = time.monotonic()
                if self._pool is None or self._pool.loop is not loop:
                    # Fast reward functions of a burst run back to back on one or
                    # two threads instead of waking a thread each (elastic_executor.py).
                    self._pool = ElasticExecutor(loop, max_threads=self.max_concurrency)
                fn = faults.reward_fn(mod.reward)
                run = self._pool.submit(lambda: fn(summary), kind=function)
                result = await asyncio.wait_for(run, self.timeout_s)
                ran_ms = (time.monotonic() - t_run) * 1000.0
            except TimeoutError:
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self.package}.{function}: timed out after {self.timeout_s}s")
            except Exception as e:  # noqa: BLE001 - any failure of the reward is reported, not raised
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self.package}.{function}: {type(e).__name__}: {e}")
        value, err = parse_reward(result)
        return RewardOutcome(value, value is not None, time.monotonic() - t0, 0, first, 0, ran_ms, 0.0,
                             f"{self.package}.{function}: {err}" if err else "")

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
