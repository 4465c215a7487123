"""Rewards computed in this process: `rewards.<function>` off the event loop.

Bounded concurrency, same outcome type as the serverless client; a raised
exception, a non-numeric result or a call past its time limit is ok=False
with the reason, never a 0 (a hung reward would otherwise hold its group forever).
A reward that calls sys.exit() fails its call the same way (RewardExited).

A module with a Lambda `handler(event, context)` is run through it, as the
serverless client runs it, with a context whose remaining time is the call's
limit: the module's own LAMBDA_TIMEOUT_S where it declares one (and at least
`timeout_s`), as the serverless client waits. A reward that budgets its time
(code_exec: RollPacker's adaptive timeout per test, cut to the remaining time)
then scores a run over the limit 0 here as there. Called as `reward(summary)`
it had no deadline: a program looping in every test took past `timeout_s`,
the trajectory failed and was left out of its batch, so the policy was never
trained on the 0 its looping code earns.

A call past its limit is given up, but its thread cannot be killed: one that
never returns (an infinite loop, a blocking read) kept it for good, and after
`max_concurrency` of them every reward call timed out while the run went on
learning nothing, and nothing said why. The executor now leaves such a thread
behind and serves the next calls on another (logged once per function); past
STUCK_PER_SLOT x `max_concurrency` threads left behind, calls of a function
that left some fail at once, saying to fix it or run it with
reward.mode=serverless, where the emulator kills a timed-out invocation's
worker process.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from roll_agentic import faults
from roll_agentic.elastic_executor import ElasticExecutor
from roll_agentic.failures import deterministic_error
from roll_agentic.reward.outcome import RewardOutcome, parse_reward
from roll_agentic.reward.reward_ref import shown_as

log = logging.getLogger(__name__)

# Threads left on calls that never returned, per unit of max_concurrency, before calls
# of the functions that left them fail at once: each is leaked for the process's life
# (and one in a busy loop takes its share of the GIL from the event loop).
STUCK_PER_SLOT = 2


@dataclass
class HandlerContext:
    """The part of Lambda's handler `context` a reward reads: the time it has left.

    Made only by `scoring_call`, which the start check (rollout/task_check.py) calls too:
    a handler that budgets its time passes there exactly as it runs here."""

    deadline: float | None  # time.monotonic() by which the call must be done; None: no limit
    function_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        if self.deadline is None:
            return 2**31 - 1
        return max(0, int((self.deadline - time.monotonic()) * 1000))


class RewardExited(RuntimeError):
    """A reward function raised SystemExit (it called sys.exit()): a failed reward, not a worker exit."""


def has_handler(mod: ModuleType) -> bool:
    """Whether the reward module has a Lambda `handler(event, context)`: then it is what scores
    in process too (`scoring_call`)."""
    return callable(getattr(mod, "handler", None))


def scoring_call(mod: ModuleType, function: str, deadline: float | None) -> Callable[[dict], object]:
    """What scores a summary in process: the module's `handler(event, context)` where it has one
    (as the serverless client runs it), else `reward(summary)`. The start check calls the same."""
    if not has_handler(mod):
        return mod.reward
    handler = mod.handler

    def call(summary: dict) -> object:
        return handler(summary, HandlerContext(deadline, function))

    return call


def _contained(fn: Callable[[dict], object], summary: dict) -> object:
    """fn(summary) with its SystemExit turned into RewardExited.

    Raised on the executor's thread and awaited, a SystemExit was re-raised out of score()
    and the event loop: one reward's sys.exit() ended the rollout worker and every episode
    on it (env_calls._contained does the same for envs). KeyboardInterrupt is left alone:
    it is the user stopping the run, not the reward's failure."""
    try:
        return fn(summary)
    except SystemExit as err:
        raise RewardExited(f"SystemExit({err.code!r}) raised: a reward must return a number, "
                           "not call sys.exit()") from None


class LocalRewardClient:
    def __init__(self, max_concurrency: int = 16, package: str = "rewards", timeout_s: float | None = None) -> None:
        self.package = package
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._sem = asyncio.Semaphore(max_concurrency)
        self._pool: ElasticExecutor | None = None  # made in the event loop of the first call
        self._modules: dict[str, ModuleType] = {}
        self.max_stuck = STUCK_PER_SLOT * max_concurrency
        self._warned_stuck: set[str] = set()  # functions whose first left-behind call was logged

    def _module(self, function: str) -> tuple[ModuleType, bool]:
        mod = self._modules.get(function)
        if mod is not None:
            return mod, False
        name = self._qualified(function)
        mod = importlib.import_module(name)
        if not callable(getattr(mod, "reward", None)):
            raise AttributeError(f"{name} has no function `reward(summary)`")
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
        run: asyncio.Future | None = None
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
                pool = self._pool
                if pool.abandoned >= self.max_stuck and (stuck := pool.abandoned_kinds().get(function)):
                    return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                         self._stuck_error(function, stuck, limit, pool.abandoned))
                fn = faults.reward_fn(scoring_call(mod, function, deadline))
                run = pool.submit(functools.partial(_contained, fn, summary), kind=function)
                try:
                    result = await asyncio.wait_for(run, limit)
                except asyncio.CancelledError:
                    # The episode was aborted (a round closed, the run stops): its thread, if
                    # still on the call, must not count against the pool either, or aborted
                    # hung calls wedge it with no warning and no bound (they never time out).
                    pool.abandon(run)
                    raise
                ran_ms = (time.monotonic() - t_run) * 1000.0
            except TimeoutError:
                # run not cancelled: the reward itself raised a TimeoutError, its thread is free
                if run is not None and run.cancelled() and pool.abandon(run) and function not in self._warned_stuck:
                    self._warned_stuck.add(function)
                    log.warning("%s.%s: a call still running after its %ss limit was left on its thread "
                                "(Python threads cannot be killed); other threads serve the next calls. Past "
                                "%d threads left so, its calls fail: if it can hang, fix it or run it with "
                                "reward.mode=serverless (a timed-out invocation's process is killed)",
                                self.package, function, limit, self.max_stuck)
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self._qualified(function)}: timed out after {limit}s")
            except Exception as e:  # noqa: BLE001 - any failure of the reward is reported, not raised
                # The module's own bug (or a module that cannot be imported) recurs on every call;
                # an OSError (a judge service it calls is down) may pass (failures.py).
                return RewardOutcome(None, False, time.monotonic() - t0, 0, False, 0, 0.0, 0.0,
                                     f"{self._qualified(function)}: {type(e).__name__}: {e}",
                                     deterministic=deterministic_error(e))
        value, err = parse_reward(result)
        return RewardOutcome(value, value is not None, time.monotonic() - t0, 0, first, 0, ran_ms, 0.0,
                             f"{self._qualified(function)}: {err}" if err else "", deterministic=bool(err))

    def _qualified(self, function: str) -> str:
        """The module a task's `reward` names: dotted, the user's own (reward_ref.py); bare, in `package`."""
        return function if "." in function else f"{self.package}.{function}"

    def _stuck_error(self, function: str, stuck: int, limit: float | None, total: int) -> str:
        return (f"{self._qualified(function)}: not called: {stuck} of its calls never returned after their {limit}s "
                f"limit and still hold a thread each ({total} such threads in this process, {self.max_stuck} at "
                f"most; Python threads cannot be killed). Fix {shown_as(function)} so it returns, or run it with "
                f"reward.mode=serverless, where an invocation past its timeout has its worker process killed")

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
