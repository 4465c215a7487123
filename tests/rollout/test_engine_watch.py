"""Waiting for a failed engine to come back (rollout/engine_watch.py)."""

from __future__ import annotations

import asyncio

import ray

from roll_agentic.rollout.engine_watch import wait_until_back


class _Call:
    def __init__(self, fn):
        self.remote = fn


class _Engine:
    """Fails its first `failing` pings with `error`, then answers."""

    def __init__(self, failing: int, error: type[BaseException] = ConnectionError):
        self.pings, self.failing, self.error = 0, failing, error
        self.ping = _Call(self._ping)

    async def _ping(self):
        self.pings += 1
        if self.pings <= self.failing:
            raise self.error()
        return "pong"


class _Router:
    def __init__(self):
        self.alive: list[int] = []
        self.mark_alive = _Call(self._mark)

    async def _mark(self, index):
        self.alive.append(index)


def _wait(engine, router, stopped=lambda: False):
    return asyncio.run(wait_until_back(engine, router, 3, stopped, first_wait_s=0.0005, max_wait_s=0.001))


def test_an_engine_that_takes_many_pings_to_restart_is_routed_to_again():
    """The watcher gave up after 120 pings (2 minutes for a fast-failing ping): a large model's
    engine that restarted later stayed out of routing for the rest of the run."""
    engine, router = _Engine(failing=300), _Router()
    assert _wait(engine, router) is True
    assert engine.pings == 301 and router.alive == [3]


def test_an_engine_out_of_restarts_is_left_dead():
    engine, router = _Engine(failing=10**6, error=ray.exceptions.ActorDiedError), _Router()
    assert _wait(engine, router) is False
    assert engine.pings == 1 and router.alive == []


def test_a_stopped_worker_stops_waiting():
    engine, router = _Engine(failing=10**6), _Router()
    assert _wait(engine, router, stopped=lambda: engine.pings >= 5) is False
    assert engine.pings == 5 and router.alive == []
