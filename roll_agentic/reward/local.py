"""Rewards computed in this process: `rewards.<function>` off the event loop.

Bounded concurrency, same outcome type as the serverless client; a raised
exception, a non-numeric result or a call past its time limit is ok=False
with the reason, never a 0 (a hung reward would otherwise hold its group forever).

A module with a Lambda `handler(event, context)` is run through it, as the
serverless client runs it, with a context whose remaining time is the call's
limit: the module's own LAMBDA_TIMEOUT_S where it declares one (and at least
`timeout_s`), as the serverless client waits. A reward that budgets its time
(code_exec: RollPacker's adaptive timeout per test, cut to the remaining time)
then scores a run over the limit 0 here as there. Called as `reward(summary)`
it had no deadline: a program looping in every test took past `timeout_s`,
the trajectory failed and was left out of its batch, so the policy was never
trained on the 0 its looping code earns.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from dataclasses import dataclass
from types import ModuleType

from roll_agentic import faults
from roll_agentic.elastic_executor import ElasticExecutor
from roll_agentic.reward.outcome import RewardOutcome, parse_reward


@dataclass
class _Context:
    """The part of Lambda's handler `context` a reward reads: the time it has left."""

    deadline: float | None  # time.monotonic() by which the call must be done; None: no limit
    function_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        if self.deadline is None:
            return 2**31 - 1
        return max(0, int((self.deadline - time.monotonic()) * 1000))


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

    def limit_s(self, mod: ModuleType) -> float | None:
        """A call's time limit: the module's declared LAMBDA_TIMEOUT_S, at least `timeout_s`."""
        declared = getattr(mod, "LAMBDA_TIMEOUT_S", None)
        if not isinstance(declared, int | float) or isinstance(declared, bool):
            return self.timeout_s
        return float(declared) if self.timeout_s is None else max(float(declared), self.timeout_s)

    async def score(self, function: str, summary: dict) -> RewardOutcome:
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        limit = self.timeout_s
        async with self._sem:
            try:
                mod, first = self._module(function)
                limit = self.limit_s(mod)
                t_run = time.monotonic()
                deadline = None if limit is None else t_run + limit  # the wait below gives up then too
                if self._pool is None or self._pool.loop is not loop:
                    # Fast reward functions of a burst run back to back on one or
                    # two threads instead of waking a thread each (elastic_executor.py).
                    self._pool = ElasticExecutor(loop, max_threads=self.max_concurrency)
                handler = getattr(mod, "handler", None)
                if callable(handler):
                    def call(s: dict, handler=handler) -> object:
                        return handler(s, _Context(deadline, function))
                else:
                    call = mod.reward
                fn = faults.reward_fn(call)
                run = self._pool.submit(lambda: fn(summary), kind=function)
                result = await asyncio.wait_for(run, limit)
                ran_ms = (time.monotonic() - t_run) * 1000.0
            except TimeoutError:
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self.package}.{function}: timed out after {limit}s")
            except Exception as e:  # noqa: BLE001 - any failure of the reward is reported, not raised
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self.package}.{function}: {type(e).__name__}: {e}")
        value, err = parse_reward(result)
        return RewardOutcome(value, value is not None, time.monotonic() - t0, 0, first, 0, ran_ms, 0.0,
                             f"{self.package}.{function}: {err}" if err else "")

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
