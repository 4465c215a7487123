"""Weight sync to the engines: live engines load the version; a wedged one cannot hold the trainer."""

from __future__ import annotations

import time

import ray
import torch
from transformers import AutoModelForCausalLM

from roll_agentic.cluster import init_ray
from roll_agentic.config import EngineConfig, RayConfig
from roll_agentic.engine.host import engine_actor_class
from roll_agentic.train.weight_sync import WeightPublisher


def _wedge(host) -> None:  # runs in the actor: the engine's next batch or reload waits for the lock forever
    host.engine._compute_lock.acquire()


def _unwedge(host) -> None:
    host.engine._compute_lock.release()


def test_a_wedged_engine_is_counted_failed_and_the_others_load(tiny_model_path):
    started = init_ray(RayConfig(num_cpus=4))
    actor = engine_actor_class(1.0)
    healthy, wedged = (actor.remote("hf", tiny_model_path, EngineConfig(backend="hf")) for _ in range(2))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    publisher = WeightPublisher([healthy, wedged], "sync-test", load_timeout_s=3.0)
    try:
        ray.get([healthy.ping.remote(), wedged.ping.remote()], timeout=120)
        ray.get(wedged.__ray_call__.remote(_wedge), timeout=60)
        t0 = time.monotonic()
        m = publisher.publish(1, state)
        assert time.monotonic() - t0 < 60  # bounded: it waited forever before
        assert m["sync/failed_engines"] == 1.0
        assert ray.get(healthy.weight_version.remote(), timeout=30) == 1
        ray.get(wedged.__ray_call__.remote(_unwedge), timeout=60)
        assert publisher.publish(2, state)["sync/failed_engines"] == 0.0  # back once it serves
    finally:
        publisher.close()
        for h in (healthy, wedged):
            ray.kill(h)
        if started:
            ray.shutdown()
