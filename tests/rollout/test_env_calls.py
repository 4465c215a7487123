"""An episode's env calls: threads left to hung calls, per-env bounds (rollout/env_calls.py).

The worker-level cases (a hung step failing its episode, hung threads left to later
calls) are in test_worker.py, through whole episodes."""

import asyncio
import functools
import threading

import pytest

from roll_agentic.rollout.env_calls import EnvCalls, EnvFailure


def test_an_episode_aborted_while_its_env_call_hangs_frees_the_thread():
    """Tail batching aborts the slowest episodes, hung ones among them: cancelled before its
    limit, a hung call's thread stayed counted (its timer was cancelled with it) for good."""
    gate, started = threading.Event(), threading.Event()

    class Hung:
        def step(self, action):
            started.set()
            gate.wait()
            return "obs", 0.0, True, False, {}

    async def main():
        calls = EnvCalls(30.0)
        call = asyncio.ensure_future(calls(Hung().step, "a"))
        while not started.is_set():  # hung in its thread, not merely queued (a loaded machine is slow)
            await asyncio.sleep(0.01)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        return calls._executor

    try:
        executor = asyncio.run(main())
        assert executor.abandoned == 1 and executor._threads == 0  # the next call gets a thread
    finally:
        gate.set()


def test_hung_constructors_of_one_env_do_not_refuse_another_envs(monkeypatch):
    """Envs are built through one function (`make_text_env`): stuck calls counted by function
    name let one env's hung constructors refuse every other env's construction."""
    import roll_agentic.rollout.env_calls as env_calls_mod

    monkeypatch.setattr(env_calls_mod, "MAX_STUCK_ENV_THREADS", 1)
    gate = threading.Event()

    def make(env_id):
        if env_id == "hangs":
            gate.wait()
        return env_id

    async def main():
        build = functools.partial(EnvCalls(0.1), make)
        with pytest.raises(EnvFailure, match="exceeded 0.1s"):
            await build("hangs", call_kind="make(hangs)")
        with pytest.raises(EnvFailure, match="not made"):  # past the bound: refused at once
            await build("hangs", call_kind="make(hangs)")
        return await build("fine", call_kind="make(fine)")

    try:
        assert asyncio.run(main()) == "fine"
    finally:
        gate.set()
