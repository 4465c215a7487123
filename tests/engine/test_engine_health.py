"""Engines that stop answering: a request never waits forever, and a broken engine is not routed to.

- A host whose engine is wedged (alive, answering pings, never finishing a
  request: here its compute thread never gets the lock) fails each request
  after the client's time limit, as an engine failure, and frees it there; its
  `ping` answers only once the engine serves again.
- A vLLM engine core that dies under a living host (slow: starts vLLM twice)
  takes the host down with it: the in-flight request fails as an engine
  failure (not as a refusal, which would keep the engine routed to), and Ray's
  restarted actor serves again.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time

import pytest
import ray

from roll_agentic.cluster import init_ray
from roll_agentic.config import EngineConfig, RayConfig
from roll_agentic.engine.engine_client import (
    BatchingEngineClient,
    EngineRefusedRequest,
    EngineRequestError,
    EngineTimeout,
)
from roll_agentic.engine.host import engine_actor_class
from roll_agentic.engine.protocol import GenerationResult, SamplingParams


def _wedge(host) -> None:  # runs in the actor: a batch would now wait for the lock forever
    host.engine._compute_lock.acquire()


def _unwedge(host) -> None:
    host.engine._compute_lock.release()


async def _answers(ref, within_s: float) -> bool:
    try:
        await asyncio.wait_for(ref, within_s)
        return True
    except TimeoutError:
        return False


def test_a_wedged_engine_times_requests_out_frees_them_and_fails_pings_until_it_serves(tiny_model_path):
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf"))
    try:
        ray.get(handle.ping.remote(), timeout=120)
        ray.get(handle.__ray_call__.remote(_wedge), timeout=60)

        async def main():
            client = BatchingEngineClient(handle, request_timeout_s=1.0)
            t0 = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*(
                client.generate([1, 2, 3], SamplingParams(max_tokens=4), f"w-{i}") for i in range(3)),
                return_exceptions=True), 30)
            waited = time.monotonic() - t0
            # The expiries are fire-and-forget and an async actor may run calls out of order:
            # the worker's ping comes a router round trip later; here, wait for them to land.
            while (await handle.stats.remote())["expired"] < 3:
                await asyncio.sleep(0.05)
            # alive but wedged: a ping must not vouch for it
            pinged_while_wedged = await _answers(handle.ping.remote(), 2.0)
            await handle.__ray_call__.remote(_unwedge)
            pinged_after = await _answers(handle.ping.remote(), 60.0)
            after = await client.generate([1, 2, 3], SamplingParams(max_tokens=2), "after")
            return client, results, waited, pinged_while_wedged, pinged_after, after

        client, results, waited, pinged_while_wedged, pinged_after, after = asyncio.run(main())
        assert all(isinstance(r, EngineTimeout) for r in results), results
        # an engine failure, handled like a dead actor (the worker marks the engine dead), not a refusal
        assert all(isinstance(r, EngineRequestError) and not isinstance(r, EngineRefusedRequest) for r in results)
        assert waited < 15 and client.timeouts == 3
        assert not pinged_while_wedged and pinged_after
        assert isinstance(after, GenerationResult) and len(after.token_ids) == 2
        deadline = time.monotonic() + 30
        while (stats := ray.get(handle.stats.remote(), timeout=30))["outstanding"]:
            assert time.monotonic() < deadline, "the expired requests still hold the engine"
            time.sleep(0.2)
        assert stats["expired"] == 3 and stats["engine"]["aborted"] >= 3  # freed in the engine, not left to run
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()


def _vllm_processes(host) -> list[int]:
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM")]


def _pid(host) -> int:
    return os.getpid()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_a_dead_vllm_engine_core_restarts_its_host_instead_of_refusing_every_request(tiny_model_path):
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("vllm", tiny_model_path,
                                            EngineConfig(backend="vllm", max_model_len=512, kv_cache_gib=0.25))
    try:
        ray.get(handle.ping.remote(), timeout=300)
        first_pid = ray.get(handle.__ray_call__.remote(_pid), timeout=60)
        cores = ray.get(handle.__ray_call__.remote(_vllm_processes), timeout=60)
        assert cores

        async def main():
            client = BatchingEngineClient(handle, request_timeout_s=120.0)
            long = asyncio.ensure_future(client.generate([1, 2, 3], SamplingParams(max_tokens=400), "long"))
            await asyncio.sleep(0.3)
            for pid in cores:
                os.kill(pid, signal.SIGKILL)  # like an OOM kill of the engine core
            return await asyncio.wait_for(asyncio.gather(long, return_exceptions=True), 150)

        (failed,) = asyncio.run(main())
        assert isinstance(failed, Exception) and not isinstance(failed, EngineRefusedRequest), failed
        _serves_again_restarted(handle, first_pid, ping_timeout_s=30)
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()


def _serves_again_restarted(handle, first_pid: int, ping_timeout_s: float) -> None:
    """Pings as the worker's watcher does until an actor answers; it must be a restarted
    one (another process) that generates."""
    deadline = time.monotonic() + 300
    while True:
        try:
            ray.get(handle.ping.remote(), timeout=ping_timeout_s)
            break
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            assert time.monotonic() < deadline, "Ray never restarted the engine host"
            time.sleep(1.0)
    assert ray.get(handle.__ray_call__.remote(_pid), timeout=60) != first_pid
    result = ray.get(handle.generate.remote([1, 2, 3], SamplingParams(max_tokens=3), "again"), timeout=120)
    assert len(result.token_ids) == 3


def _restart_after(host, seconds: float) -> None:
    host.wedged_restart_s = seconds


def test_an_engine_wedged_for_good_is_restarted_not_pinged_forever(tiny_model_path):
    """A suspect engine whose probe has not answered for `wedged_restart_s` ends its actor,
    so Ray restarts it: the workers' watcher used to ping it for 22 minutes, then give up."""
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf"))
    try:
        ray.get(handle.ping.remote(), timeout=120)
        first_pid = ray.get(handle.__ray_call__.remote(_pid), timeout=60)
        ray.get(handle.__ray_call__.remote(_restart_after, 2.0), timeout=60)
        ray.get(handle.__ray_call__.remote(_wedge), timeout=60)  # and never released

        async def expire_one():
            client = BatchingEngineClient(handle, request_timeout_s=1.0)
            try:
                await client.generate([1, 2, 3], SamplingParams(max_tokens=4), "wedged")
            except EngineTimeout:
                pass
            while (await handle.stats.remote())["expired"] < 1:
                await asyncio.sleep(0.05)

        asyncio.run(expire_one())
        time.sleep(2.5)
        _serves_again_restarted(handle, first_pid, ping_timeout_s=10)
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()


def test_a_sleeping_engine_is_alive_and_never_restarted_for_sleeping(tiny_model_path):
    """An engine put to sleep (bench reliability-load does; meant for weight syncs) holds its requests
    until `wake`. A request whose client gave up meanwhile (before clients counted only
    time awake, a sleep longer than the client's time limit did) made the host suspect; its next ping then probed through the
    sleeping engine, which could not answer before the wake, and once `wedged_restart_s`
    had passed the host ended itself: Ray restarted an engine that was only asleep (and
    the restarted one came back awake, spending the actor's one restart)."""
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf"))
    try:
        ray.get(handle.ping.remote(), timeout=120)
        first_pid = ray.get(handle.__ray_call__.remote(_pid), timeout=60)
        ray.get(handle.__ray_call__.remote(_restart_after, 1.0), timeout=60)
        ray.get(handle.sleep.remote(), timeout=60)

        async def main():
            # waits for the wake: no time limit of its own
            held = asyncio.ensure_future(BatchingEngineClient(handle, request_timeout_s=None).generate(
                [1, 2, 3], SamplingParams(max_tokens=2), "held"))
            # A client gives up on a request to a sleeping engine only where it cannot learn
            # how long the engine slept (test_a_request_waits_out_its_engines_sleep...): one did.
            await handle.expire.remote("gave-up")
            await asyncio.sleep(1.5)  # asleep for longer than wedged_restart_s
            # alive, and says it is asleep: answered at once, not after the wake
            pinged_asleep = await _answers(handle.ping.remote(), 5.0)
            stats = await handle.stats.remote()
            pid_asleep = await handle.__ray_call__.remote(_pid)
            assert not held.done()  # still waiting for the wake, not failed
            await handle.wake.remote()
            result = await asyncio.wait_for(held, 60)
            pinged_awake = await _answers(handle.ping.remote(), 30.0)
            # Suspect before it was put to sleep (a request given up on while awake), then
            # asleep past wedged_restart_s: pinged, it answers at once; woken, the time it
            # slept does not count as time it failed to answer in, and its probe passes.
            await handle.expire.remote("lost-while-awake")
            await handle.sleep.remote()
            await asyncio.sleep(1.5)
            pinged_suspect_asleep = await _answers(handle.ping.remote(), 5.0)
            await handle.wake.remote()
            pinged_suspect_awake = await _answers(handle.ping.remote(), 30.0)
            return pinged_asleep, stats, pid_asleep, result, pinged_awake, pinged_suspect_asleep, pinged_suspect_awake

        pinged_asleep, stats, pid_asleep, result, pinged_awake, pinged_suspect_asleep, pinged_suspect_awake = \
            asyncio.run(main())
        assert pinged_asleep and stats["asleep"] and stats["expired"] == 1
        assert pid_asleep == first_pid  # not restarted for sleeping
        assert len(result.token_ids) == 2 and pinged_awake
        assert pinged_suspect_asleep and pinged_suspect_awake
        assert not ray.get(handle.stats.remote(), timeout=30)["asleep"]
        assert ray.get(handle.__ray_call__.remote(_pid), timeout=60) == first_pid
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()


def test_a_request_waits_out_its_engines_sleep_and_an_awake_wedged_engine_still_times_out(tiny_model_path):
    """The client's time limit counts only time its engine is awake. A request past the
    limit while its engine slept (RollMux phase switches, weight syncs, `bench reliability`)
    failed like a dead engine's: the worker counted an engine failure, marked the engine
    dead and retried the episode elsewhere. An engine that wakes wedged still fails the
    request once it has been awake for the limit."""
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf"))
    try:
        ray.get(handle.ping.remote(), timeout=120)
        ray.get(handle.sleep.remote(), timeout=60)

        async def main():
            client = BatchingEngineClient(handle, request_timeout_s=1.0)
            held = asyncio.ensure_future(client.generate([1, 2, 3], SamplingParams(max_tokens=2), "held"))
            await asyncio.sleep(3.5)  # asleep for over three limits
            done_asleep = held.done()
            await handle.wake.remote()
            result = await asyncio.wait_for(held, 60)
            expired_after_sleep = (await handle.stats.remote())["expired"]
            # Asleep past the limit, then woken wedged: it fails a limit after the wake, not at it.
            await handle.sleep.remote()
            hung = asyncio.ensure_future(client.generate([1, 2, 3], SamplingParams(max_tokens=2), "hung"))
            await asyncio.sleep(2.5)
            await handle.__ray_call__.remote(_wedge)
            await handle.wake.remote()
            woke = time.monotonic()
            failed = (await asyncio.wait_for(asyncio.gather(hung, return_exceptions=True), 30))[0]
            failed_after_s = time.monotonic() - woke
            await handle.__ray_call__.remote(_unwedge)
            return client, done_asleep, result, expired_after_sleep, failed, failed_after_s

        client, done_asleep, result, expired_after_sleep, failed, failed_after_s = asyncio.run(main())
        assert not done_asleep  # neither failed nor answered while asleep
        assert isinstance(result, GenerationResult) and len(result.token_ids) == 2
        assert expired_after_sleep == 0  # the host was not made suspect for sleeping
        assert isinstance(failed, EngineTimeout) and "asleep" in str(failed), failed
        assert 0.8 <= failed_after_s < 10, failed_after_s
        assert client.timeouts == 1
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()
