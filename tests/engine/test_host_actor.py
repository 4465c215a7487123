"""The engine host as the Ray actor the framework runs: control calls are never starved.

More generate calls than Ray's default actor concurrency (1,000) wait on a
sleeping engine; the `wake`, `stats` and `load_weights` calls that come after
them must still be answered, and then every request completes.
"""

import time

import pytest
import ray

from roll_agentic.cluster import init_ray
from roll_agentic.config import EngineConfig, RayConfig
from roll_agentic.engine.host import engine_actor_class
from roll_agentic.engine.protocol import SamplingParams

WAITING = 1100  # past Ray's default limit of 1,000 concurrent calls per async actor


@pytest.mark.slow
def test_wake_and_weight_loads_get_through_while_more_than_a_thousand_requests_wait(tiny_model_path):
    started = init_ray(RayConfig(num_cpus=2))
    engine = None
    try:
        engine = engine_actor_class(1.0).remote("hf", tiny_model_path, EngineConfig(backend="hf", max_batch=128))
        ray.get(engine.ping.remote(), timeout=120)
        ray.get(engine.sleep.remote(), timeout=60)
        sampling = SamplingParams(max_tokens=1)
        refs = [engine.generate.remote([1, 2, 3], sampling, f"r{i}", "t") for i in range(WAITING)]
        deadline = time.monotonic() + 120
        while ray.get(engine.stats.remote(), timeout=60)["outstanding"] < WAITING:
            assert time.monotonic() < deadline, "the generate calls never all reached the engine"
            time.sleep(0.2)
        assert ray.get(engine.weight_version.remote(), timeout=60) == 0
        ray.get(engine.wake.remote(), timeout=60)  # the deadlock: this call had no slot left
        results = ray.get(refs, timeout=300)
        assert len(results) == WAITING and all(len(r.token_ids) == 1 for r in results)
        assert ray.get(engine.stats.remote(), timeout=60)["outstanding"] == 0
    finally:
        if engine is not None:
            ray.kill(engine)
        if started:
            ray.shutdown()
