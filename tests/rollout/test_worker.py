import asyncio
import threading
import time

import gymnasium as gym

from roll_agentic.config import EngineConfig, RewardConfig, TaskConfig
from roll_agentic.engine.host import EngineHost
from roll_agentic.engine.router import Router
from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.worker import RolloutWorker
from tests.rollout.local_handle import LocalHandle


class SlowCounter(gym.Env):
    """Three turns, each env step takes `delay` seconds; reward 1 at the end."""

    def __init__(self, delay: float = 0.0, turns: int = 3):
        self.delay, self.turns, self.t = delay, turns, 0
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return "count 0", {}

    def step(self, action):
        time.sleep(self.delay)
        self.t += 1
        done = self.t >= self.turns
        return f"count {self.t}", float(done), done, False, {"success": done}

    def close(self):
        pass


RESETS: list[int] = []  # seeds reset by CountedResets, in order


class CountedResets(SlowCounter):
    def reset(self, *, seed=None, options=None):
        RESETS.append(seed)
        return super().reset(seed=seed, options=options)


def _setup(model_path, alpha, delay, group_size=2, env="SlowCounter", prepare_ahead=False):
    task = TaskConfig(name="count", env_id=env if ":" in env else f"tests.rollout.test_worker:{env}",
                      env_kwargs={"delay": delay}, max_turns=5, reward="env_return", group_size=group_size,
                      max_new_tokens=4)
    engine = EngineHost("hf", model_path, EngineConfig(), seed=0)
    buffer = TrajectoryBuffer([TaskShare("count", 1.0, group_size)], groups_per_step=1, alpha=alpha,
                              prepare_ahead=prepare_ahead)
    router = Router([("default", "cpu")], {"count": "default"})
    worker = RolloutWorker(0, [task], model_path, [LocalHandle(engine)], LocalHandle(router), LocalHandle(buffer),
                           alpha, 1.0, 1.0, 1024, RewardConfig(mode="local"), "", 1, 30.0)
    return engine, buffer, worker


def engine_weights_file(engine, path):
    """The engine's own weights as a file it can load again: a new version, the same weights."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in engine.engine.model.state_dict().items()
               if k != "lm_head.weight"}, str(path))
    return str(path)


def test_three_turn_episode_records_exactly_the_generated_tokens(tiny_model_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=1, delay=0.0)
        run = asyncio.ensure_future(worker.run())
        [group] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        for traj in group:
            assert traj.num_turns == 3 and traj.status == "ok" and traj.reward == 1.0
            assert sum(traj.loss_mask) == sum(t.generated_tokens for t in traj.turns)
            runs, n = [], 0  # lengths of the contiguous generated spans, one per turn
            for m in traj.loss_mask + [0]:
                if m:
                    n += 1
                elif n:
                    runs.append(n)
                    n = 0
            assert runs == [t.generated_tokens for t in traj.turns]
            assert all(lp < 0 for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m)
    asyncio.run(main())


def test_trajectory_beyond_the_staleness_bound_is_aborted_and_restarted(tiny_model_path, tmp_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.3)
        weights = engine_weights_file(engine, tmp_path / "w.safetensors")
        run = asyncio.ensure_future(worker.run())
        await asyncio.sleep(0.5)  # episodes are mid-way, on version 0
        await engine.load_weights(1, weights)
        await buffer.advance(1)
        [group] = await asyncio.wait_for(buffer.get_batch(1, version=1), 60)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        assert worker.counters["stale_restarts"] >= 1
        for traj in group:  # restarted: every turn on the new weights
            assert traj.start_version == 1 and {t.weight_version for t in traj.turns} == {1}
    asyncio.run(main())


def test_an_env_step_past_its_timeout_fails_the_episode_not_the_worker(tiny_model_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=1, delay=1.0)
        worker.env_calls.timeout_s = 0.2
        run = asyncio.ensure_future(worker.run())
        await asyncio.sleep(2.5)  # every attempt's first step hangs for 1 s: timed out at 0.2 s
        counters = dict(worker.counters)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)  # the worker itself keeps going and stops cleanly
        return counters, buffer.metrics()

    counters, metrics = asyncio.run(main())
    # Without the timeout every attempt would simply finish after 3 s: no failure at all.
    assert counters["env_failures"] >= 4  # each attempt cut at 0.2 s, then retried
    assert metrics["buffer/trajectories_failed"] >= 1  # out of retries: the episode failed, the worker went on


def test_a_held_group_resets_its_envs_before_its_step_and_generates_only_after(tiny_model_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0, env="CountedResets",
                                        prepare_ahead=True)
        RESETS.clear()
        run = asyncio.ensure_future(worker.run())
        [first] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        await asyncio.sleep(0.3)  # the trainer "trains": step 1 is not open yet
        requests_before = engine.per_task["count"]["requests"]
        held_resets = len(RESETS) - 2
        await asyncio.sleep(0.3)
        quiet = engine.per_task["count"]["requests"] == requests_before  # no generation for a closed step
        await buffer.advance(1)
        # The engine still serves version 0 (nothing was loaded): train "at" version 0.
        [second] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        await asyncio.sleep(0.3)
        await buffer.stop()  # step 2's held group never opens: it must not hold the worker up
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return first, second, held_resets, quiet, requests_before

    first, second, held_resets, quiet, requests_before = asyncio.run(main())
    assert held_resets == 2 and quiet  # step 1's two envs were reset during the "training"
    assert requests_before == 6  # step 0: two episodes, three turns each
    assert {t.seed for t in second} == {RESETS[2]}  # step 1 played the prompt reset ahead
    for traj in first + second:
        assert traj.status == "ok" and traj.num_turns == 3
    assert all(traj.start_version == 0 for traj in second)  # the hf engine's weights never changed



RELEASE = threading.Event()  # set at each test's end: the stuck env threads return
HANGS_LEFT = [0]  # how many more first steps hang (HangsFirst)


class HangsFirst(SlowCounter):
    """The first step of an episode blocks until RELEASE, for the first HANGS_LEFT[0] episodes
    (hangs for ever with a large count): an env call that never returns."""

    def step(self, action):
        if self.t == 0 and HANGS_LEFT[0] > 0:
            HANGS_LEFT[0] -= 1
            RELEASE.wait()
        return super().step(action)


def _run_hanging(model_path, seconds: float, until_group: bool = False):
    async def main():
        engine, buffer, worker = _setup(model_path, alpha=1, delay=0.0, env="HangsFirst")
        worker.env_calls.timeout_s = 0.2
        run = asyncio.ensure_future(worker.run())
        groups = []
        if until_group:
            groups = await asyncio.wait_for(buffer.get_batch(1, version=0), seconds)
        else:
            await asyncio.sleep(seconds)
        counters, stuck = dict(worker.counters), worker.env_calls.abandoned
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return groups, counters, stuck

    try:
        return asyncio.run(main())
    finally:
        RELEASE.set()


def test_env_calls_that_never_return_leave_their_threads_to_later_calls(tiny_model_path, monkeypatch):
    import roll_agentic.rollout.env_calls as env_calls_mod

    monkeypatch.setattr(env_calls_mod, "ENV_THREADS", 2)
    RELEASE.clear()
    HANGS_LEFT[0] = 2  # both threads hang: every later call, resets included, used to wait for ever
    [group], counters, stuck = _run_hanging(tiny_model_path, 60, until_group=True)
    assert stuck == 2 and counters["env_failures"] >= 2
    assert all(t.status == "ok" for t in group)


def test_an_env_that_always_hangs_stops_leaving_threads_past_the_bound(tiny_model_path, monkeypatch):
    import roll_agentic.rollout.env_calls as env_calls_mod

    monkeypatch.setattr(env_calls_mod, "MAX_STUCK_ENV_THREADS", 3)
    RELEASE.clear()
    HANGS_LEFT[0] = 10**6
    _, counters, stuck = _run_hanging(tiny_model_path, 4.0)
    # Checked before each call: calls already under way when the bound is reached add theirs.
    assert 3 <= stuck <= 3 + 2  # group size 2
    assert counters["env_failures"] > 2 * stuck  # the rest failed at once, leaving no thread


CLOSE_GATE = threading.Event()
CLOSES_DONE = [0]
FAILED_ONCE = [False]


class FailsOnceClosesSlowly(SlowCounter):
    """Its first step ever raises (the episode's env is then closed); close blocks, as one
    waiting on a lock a stuck call holds would, until CLOSE_GATE or 20 s."""

    def step(self, action):
        if not FAILED_ONCE[0]:
            FAILED_ONCE[0] = True
            raise RuntimeError("env bug")
        return super().step(action)

    def close(self):
        CLOSE_GATE.wait(20)
        CLOSES_DONE[0] += 1


def test_closing_a_failed_env_does_not_stop_the_other_episodes(tiny_model_path):
    """A failed episode's env was closed on the event loop: a close that blocked stopped every
    episode of the worker until it returned."""
    CLOSE_GATE.clear()
    CLOSES_DONE[0], FAILED_ONCE[0] = 0, False

    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=1, delay=0.0, env="FailsOnceClosesSlowly")
        run = asyncio.ensure_future(worker.run())
        [group] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        closes_done_then = CLOSES_DONE[0]
        CLOSE_GATE.set()
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return group, closes_done_then, dict(worker.counters)

    try:
        group, closes_done_then, counters = asyncio.run(main())
    finally:
        CLOSE_GATE.set()
    assert counters["env_failures"] >= 1 and all(t.status == "ok" for t in group)
    assert closes_done_then == 0  # the group finished while the close was still blocked
