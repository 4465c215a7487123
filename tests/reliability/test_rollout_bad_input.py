"""Envs that break their contract, model output that is not UTF-8, an engine that fails and comes back.

The real RolloutWorker, Router and TrajectoryBuffer in one event loop
(LocalHandle), with stub engines where the test needs a precise reply.
"""

import asyncio

import gymnasium as gym
import pytest

from roll_agentic.config import EngineConfig, RewardConfig, TaskConfig
from roll_agentic.engine.host import EngineHost
from roll_agentic.engine.protocol import GenerationResult
from roll_agentic.engine.router import Router
from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.env_contract import EnvContractError, check_reset, check_step
from roll_agentic.rollout.trajectory import Ticket
from roll_agentic.rollout.worker import RolloutWorker
from tests.rollout.local_handle import LocalHandle

BAD_STEPS = {
    "int_obs": (7, 0.0, True, False, {}),
    "str_reward": ("obs", "abc", True, False, {}),
    "nan_reward": ("obs", float("nan"), True, False, {}),
    "old_api": ("obs", 0.0, True, {}),
    "info_list": ("obs", 0.0, True, False, []),
    "none": None,
}


class BadEnv(gym.Env):
    """A valid reset, then a step that returns `BAD_STEPS[mode]` (or a bad reset for mode=reset)."""

    def __init__(self, mode: str = "int_obs"):
        self.mode = mode
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return (b"bytes, not str", {}) if self.mode == "reset" else ("go", {})

    def step(self, action):
        return BAD_STEPS[self.mode]


class ScriptedEngine:
    """Replies with fixed token ids; fails the first `fail` requests; its ping fails `ping_fail` times."""

    def __init__(self, reply: list[int], fail: int = 0, ping_fail: int = 0):
        self.reply, self.fail, self.ping_fail = reply, fail, ping_fail
        self.requests = 0

    async def generate(self, token_ids, sampling, request_id, task=""):
        self.requests += 1
        if self.requests <= self.fail:
            raise RuntimeError("engine process died")
        return GenerationResult(list(self.reply), [-1.0] * len(self.reply), "length", 0)

    async def ping(self):
        if self.ping_fail > 0:
            self.ping_fail -= 1
            raise ConnectionError("still restarting")
        return True


def _worker(model_path, engine, env_id, env_kwargs=None, max_turns=2):
    task = TaskConfig(name="t", env_id=env_id, env_kwargs=env_kwargs or {}, max_turns=max_turns,
                      reward="env_return", group_size=2, max_new_tokens=4)
    router = Router([("default", "cpu")], {"t": "default"})
    buffer = TrajectoryBuffer([TaskShare("t", 1.0, 2)], groups_per_step=1, alpha=1)
    worker = RolloutWorker(0, [task], model_path, [LocalHandle(engine)], LocalHandle(router), LocalHandle(buffer),
                           1, 1.0, 1.0, 1024, RewardConfig(mode="local"), "", 1, 10.0)
    return worker, router


@pytest.mark.parametrize("mode", [*BAD_STEPS, "reset"])
def test_an_env_returning_wrong_types_fails_its_episode_not_the_engine(tiny_model_path, mode):
    async def main():
        worker, router = _worker(tiny_model_path, ScriptedEngine([5, 6]), "tests.reliability.test_rollout_bad_input:BadEnv",
                                 {"mode": mode})
        traj = await worker._episode(Ticket("g0", "t", 1, 2, 0), 0)
        return traj, worker, router

    traj, worker, router = asyncio.run(main())
    assert traj.status == "env_failed"
    assert ("reset" if mode == "reset" else "env call step") in traj.error
    assert "must" in traj.error  # says what was expected
    # A broken contract recurs: one failure, no replay of the episode's turns.
    assert worker.counters["env_failures"] == 1 and worker.counters["engine_failures"] == 0
    assert all(e["alive"] for e in router.snapshot()["engines"])  # a bad env never marks an engine dead


def test_contract_accepts_numpy_scalars_and_refuses_bools_as_rewards():
    import numpy as np

    check_step(("o", np.float32(0.5), np.bool_(True), False, {}))
    check_reset(("o", {}))
    with pytest.raises(EnvContractError, match="finite number"):
        check_step(("o", True, True, False, {}))


def test_model_output_that_is_not_valid_utf8_is_a_normal_reply(tiny_model_path, tokenizer):
    lone_bytes = tokenizer.convert_tokens_to_ids(["Ã", "ÿ", "Â"])  # 0xC3 0xFF 0xC2: not UTF-8

    async def main():
        worker, _ = _worker(tiny_model_path, ScriptedEngine(lone_bytes), "envs.latency_env:LongTailEnv",
                            {"sleep": False, "min_turns": 2, "max_turns": 2})
        return await worker._episode(Ticket("g0", "t", 1, 2, 0), 0)

    traj = asyncio.run(main())
    assert traj.status == "ok" and traj.num_turns == 2 and traj.reward is not None
    assert all("\ufffd" in r for r in traj.responses)  # decoded with replacement, tokens kept as sampled
    assert sum(traj.loss_mask) == 2 * len(lone_bytes)


def test_a_failed_engine_is_retried_and_routed_to_again_once_it_answers(tiny_model_path):
    async def main():
        engine = ScriptedEngine([5, 6], fail=1, ping_fail=1)
        worker, router = _worker(tiny_model_path, engine, "envs.latency_env:LongTailEnv",
                                 {"sleep": False, "min_turns": 1, "max_turns": 1})
        traj = await worker._episode(Ticket("g0", "t", 1, 2, 0), 0)
        # With one engine the retry goes straight back to it; the router learns it is
        # alive from the worker's watcher, once the engine answers a ping.
        await asyncio.wait_for(asyncio.gather(*list(worker._watched.values())), 10)
        return traj, worker, router

    traj, worker, router = asyncio.run(main())
    assert traj.status == "ok" and traj.restarts >= 1
    assert worker.counters["engine_failures"] >= 1
    assert all(e["alive"] for e in router.snapshot()["engines"])  # back in routing after its restart


def test_a_restarted_engine_serves_the_weights_it_had_before_answering(tiny_model_path, tmp_path):
    from safetensors.torch import save_file

    host = EngineHost("hf", tiny_model_path, EngineConfig(backend="hf"), seed=0)
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in host.engine.model.state_dict().items() if k != "lm_head.weight"},
              str(weights))
    host._restore = (7, str(weights))  # what a Ray restart finds recorded for this actor
    assert host.weight_version() == 0
    asyncio.run(host.ping())
    assert host.weight_version() == 7 and host._restore is None
