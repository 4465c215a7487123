"""An episode's calls into its env: off the event loop, each under a time limit, its failure contained.

Env code is the user's: it may block (a simulator, a container, a sandbox), hang,
raise, or call sys.exit(). Each call runs on a thread of an elastic pool
(roll_agentic/elastic_executor.py) under `rollout.env_step_timeout_s`; a call
past it fails its episode (`EnvFailure`) and its thread, which cannot be
killed, is left to it, so later calls get other threads. Past
`MAX_STUCK_ENV_THREADS` such threads, calls of an env that left some fail at
once, saying why. Each failure says whether a retry would meet it again
(`EnvFailure.deterministic`, roll_agentic/failures.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from roll_agentic import faults
from roll_agentic.elastic_executor import ElasticExecutor
from roll_agentic.failures import deterministic_error
from roll_agentic.rollout.env_contract import checked

log = logging.getLogger(__name__)

ENV_THREADS = 256  # at most this many env calls run at once (a thread each when slow)
# Env calls that never returned past their timeout each keep a thread (it cannot be
# killed); past this many, calls of an env that left some fail at once, saying why.
MAX_STUCK_ENV_THREADS = 64


class EnvFailure(RuntimeError):
    """An episode's env call failed. `deterministic`: the env's own code raised (or broke the
    env contract), which a retry meets again; False for a time-out, which may pass (failures.py)."""

    def __init__(self, message: str, deterministic: bool = False):
        super().__init__(message)
        self.deterministic = deterministic


class PromptTooLong(EnvFailure):
    """The first observation leaves no room for a reply: nothing to train on, and a retry
    would meet the same prompt."""

    def __init__(self, message: str):
        super().__init__(message, deterministic=True)


def _contained(call: Any, name: str) -> Any:
    """`call` with an env's sys.exit() (or a KeyboardInterrupt it raises) turned into an EnvFailure.

    Raised in the env's thread and awaited, a SystemExit or KeyboardInterrupt is re-raised
    by asyncio out of the event loop: one env's exit() ended the worker and every episode
    on it, and the trainer waited forever for their groups."""
    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except (SystemExit, KeyboardInterrupt) as err:
            raise EnvFailure(f"env call {name} raised {type(err).__name__}: {err}", deterministic=True) from None

    return run


class EnvCalls:
    """The env calls of one rollout worker: its thread pool, made on first use in the actor's loop."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._executor: ElasticExecutor | None = None
        self._stuck_warned: set[str] = set()  # env calls whose first abandoned thread was logged

    @property
    def abandoned(self) -> int:
        """Threads left to calls that never returned."""
        return self._executor.abandoned if self._executor is not None else 0

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()  # idle threads end; one stuck in a hung env call stays (daemon)
            self._executor = None

    async def __call__(self, fn, *args, call_kind: str = "", **kwargs):
        """`fn(*args, **kwargs)` on an env thread; its result, or EnvFailure."""
        # One executor future and one timer per call, not wait_for(to_thread(...)):
        # that wraps each call in an extra task and context copy, and with 64
        # episodes stepping at once the event loop's share of a hop went from
        # ~2 ms to ~6 ms (measured on a no-op env) -- latency every turn pays.
        # The executor runs bursts of fast calls on one or two threads (elastic_executor.py).
        call = _contained(faults.env_call(checked(fn)), getattr(fn, "__name__", "env call"))
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ElasticExecutor(loop, max_threads=ENV_THREADS)
        executor = self._executor
        kind = call_kind or getattr(fn, "__qualname__", "")  # e.g. FrozenLakeText.step
        if executor.abandoned >= MAX_STUCK_ENV_THREADS and (stuck := executor.abandoned_kinds().get(kind)):
            raise EnvFailure(f"env call {kind} not made: {stuck} of its calls never returned after their "
                             f"{self.timeout_s}s limit and still hold a thread each (threads cannot be "
                             "killed); fix the env so its calls return")
        fut = executor.submit(functools.partial(call, *args, **kwargs), kind=kind)
        expired = False

        def expire() -> None:
            nonlocal expired
            if not fut.done():  # the thread runs on (it cannot be killed); the episode stops waiting
                expired = True
                fut.cancel()
                # Its thread no longer counts: the next calls get another (a hung env kept
                # one each, and after ENV_THREADS of them no episode could step at all).
                if executor.abandon(fut) and kind not in self._stuck_warned:
                    self._stuck_warned.add(kind)
                    log.warning("env call %s still running after its %ss limit: left on its thread, other "
                                "threads serve the next calls", kind, self.timeout_s)

        timer = loop.call_later(self.timeout_s, expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if expired:
                raise EnvFailure(f"env call {fn.__name__} exceeded {self.timeout_s}s") from None
            # The episode itself was cancelled (aborted; tail batching's round close aborts
            # the slowest, hung ones among them): its thread, if still on the call, stops
            # counting, or aborted hung calls would take every env thread unbounded.
            executor.abandon(fut)
            raise
        except EnvFailure:
            raise
        except Exception as err:  # an env's own bug must cost one episode, not the worker
            raise EnvFailure(f"env call {fn.__name__} raised {type(err).__name__}: {err}",
                             deterministic_error(err)) from err
        finally:
            timer.cancel()
