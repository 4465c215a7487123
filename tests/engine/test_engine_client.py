"""BatchingEngineClient against a real EngineHost actor (hf engine, tiny model).

A burst of requests leaves in few Ray calls and every episode gets its own
result; one bad request fails alone; an engine that dies fails every request
it held (no episode waits forever); in-process engines are called directly.
"""

import asyncio

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
from tests.rollout.local_handle import LocalHandle


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf", max_batch=64))
    ray.get(handle.ping.remote(), timeout=120)
    yield handle
    ray.kill(handle)
    if started:
        ray.shutdown()


def test_a_burst_is_few_calls_and_each_request_gets_its_own_result(engine):
    async def main():
        client = BatchingEngineClient(engine)
        lengths = [1 + i % 4 for i in range(48)]
        results = await asyncio.gather(*(
            client.generate([1, 2, 3 + i], SamplingParams(max_tokens=n), f"burst-{i}", "t")
            for i, n in enumerate(lengths)))
        return client, lengths, results

    client, lengths, results = asyncio.run(main())
    assert client.streaming and client.requests == 48
    assert client.calls == 1  # issued in one loop turn: one Ray call
    assert [len(r.token_ids) for r in results] == lengths  # each episode got its own reply
    assert all(len(r.logprobs) == len(r.token_ids) and r.finish_reason == "length" for r in results)


def test_results_finishing_close_together_share_a_message(engine):
    async def main(linger_s):
        client = BatchingEngineClient(engine, result_linger_s=linger_s)
        # The hf engine batches requests of equal temperature: four temperatures are
        # four batches, run one after another, so four moments of finishing.
        results = await asyncio.gather(*(
            client.generate([1, 2, 3 + i], SamplingParams(max_tokens=3, temperature=1.0 - 0.1 * (i % 4)),
                            f"linger{linger_s}-{i}")
            for i in range(16)))
        assert all(len(r.token_ids) == 3 for r in results)
        return client.messages

    assert asyncio.run(main(0.0)) >= 2  # each moment its own message
    assert asyncio.run(main(5.0)) == 1  # all finished within the linger: one message, not a 5 s wait


def test_one_bad_request_fails_alone(engine):
    async def main():
        client = BatchingEngineClient(engine)
        good = [client.generate([1, 2, 3], SamplingParams(max_tokens=2), f"ok-{i}") for i in range(4)]
        bad = client.generate([10**9], SamplingParams(max_tokens=2), "out-of-vocab")
        return await asyncio.gather(*good, bad, return_exceptions=True)

    *good, bad = asyncio.run(main())
    assert all(isinstance(r, GenerationResult) and len(r.token_ids) == 2 for r in good)
    assert isinstance(bad, EngineRefusedRequest) and isinstance(bad, EngineRequestError) and "out-of-vocab" in str(bad)


def test_a_dead_engine_fails_every_request_it_held(tiny_model_path):
    started = init_ray(RayConfig(num_cpus=2))
    handle = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf"))
    try:
        ray.get(handle.ping.remote(), timeout=120)
        ray.get(handle.sleep.remote(), timeout=60)  # the requests wait in the engine

        async def main():
            client = BatchingEngineClient(handle)
            reqs = [asyncio.ensure_future(client.generate([1, 2], SamplingParams(max_tokens=2), f"d-{i}"))
                    for i in range(8)]
            while ray.get(handle.stats.remote(), timeout=60)["outstanding"] < 8:
                await asyncio.sleep(0.1)
            ray.kill(handle, no_restart=True)
            return await asyncio.wait_for(asyncio.gather(*reqs, return_exceptions=True), 60)

        results = asyncio.run(main())
        assert len(results) == 8 and all(isinstance(r, Exception) for r in results)
    finally:
        ray.kill(handle)
        if started:
            ray.shutdown()


def test_in_process_engines_are_called_directly():
    class Echo:
        async def generate(self, token_ids, sampling, request_id, task=""):
            return GenerationResult(list(token_ids), [0.0] * len(token_ids), "length", 3)

    async def main():
        client = BatchingEngineClient(LocalHandle(Echo()))
        return client, await client.generate([4, 5], SamplingParams(), "x")

    client, result = asyncio.run(main())
    assert not client.streaming and client.calls == 0
    assert result.token_ids == [4, 5] and result.weight_version == 3


def test_an_in_process_engine_that_never_answers_times_out_and_its_call_is_stopped():
    """A stand-in that cannot say whether it slept (no `slept_during`): past the limit the
    request fails as before, the engine is told to drop it, and the call stops."""
    class Hangs:
        def __init__(self):
            self.expired: list[str] = []
            self.cancelled = False

        async def generate(self, token_ids, sampling, request_id, task=""):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise

        def expire(self, request_id):
            self.expired.append(request_id)

    async def main():
        engine = Hangs()
        client = BatchingEngineClient(LocalHandle(engine), request_timeout_s=0.3)
        with pytest.raises(EngineTimeout, match="no answer within 0.3s"):
            await asyncio.wait_for(client.generate([4, 5], SamplingParams(), "h"), 10)
        await asyncio.sleep(0)  # the cancellation reaches the call
        return client, engine

    client, engine = asyncio.run(main())
    assert client.timeouts == 1 and engine.expired == ["h"] and engine.cancelled
