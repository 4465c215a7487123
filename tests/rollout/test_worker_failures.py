"""How the worker labels episodes it cannot finish: a clear status, never an untrainable "ok"."""

import asyncio
import sys
import threading

import numpy as np
import pytest

from roll_agentic.rollout.trajectory import Ticket
from tests.rollout.test_worker import SlowCounter, _setup, engine_weights_file


class ExitingEnv(SlowCounter):
    """Its simulator gives up on the second step the way some do: sys.exit()."""

    def step(self, action):
        if self.t == 1:
            sys.exit("simulator gave up")
        return super().step(action)


def test_a_first_prompt_that_leaves_no_room_to_reply_fails_the_episode_with_the_reason(tiny_model_path):
    """Such an episode was "ok" with zero tokens; a micro-batch of them crashed the trainer
    (an empty float tensor of input ids). It now fails, says why, and is neither retried
    nor re-rolled: the same prompt would never fit."""
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0)
        worker.max_model_len = 8  # "<|user|> count 0 <|assistant|>" + 4 new tokens do not fit
        run = asyncio.ensure_future(worker.run())
        for _ in range(100):
            await asyncio.sleep(0.05)
            if buffer.counters.groups_dropped_failed >= 2:
                break
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return engine, buffer, worker

    engine, buffer, worker = asyncio.run(main())
    assert buffer.counters.groups_dropped_failed >= 2 and not buffer._ready and not buffer._requeued
    assert buffer.last_error.startswith("prompt_too_long: task 'count'")
    assert "exceeds engine.max_model_len (8)" in buffer.last_error
    assert worker.counters["env_failures"] == 2 * buffer.counters.groups_dropped_failed  # no retries
    assert "count" not in engine.per_task  # nothing was sent to the engine


def test_an_episode_stale_on_every_attempt_is_labelled_stale_not_an_engine_failure(tiny_model_path, tmp_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.15)
        weights = engine_weights_file(engine, tmp_path / "w.safetensors")
        run = asyncio.ensure_future(worker.run())
        version = 0
        while not buffer.counters.groups_dropped_failed and version < 200:  # a new version every 0.1 s:
            await asyncio.sleep(0.1)  # no three-turn episode (0.45 s of env steps) stays on one version
            version += 1
            await engine.load_weights(version, weights)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return buffer, worker

    buffer, worker = asyncio.run(main())
    assert buffer.counters.groups_dropped_failed >= 1
    assert buffer.last_error.startswith("stale: attempt 4 fell more than alpha=0 weight versions behind")
    assert worker.counters["engine_failures"] == 0 and worker.counters["stale_restarts"] >= 8


def test_an_env_that_calls_sys_exit_fails_its_episode_not_the_worker(tiny_model_path):
    """A SystemExit raised in an env's thread was re-raised by asyncio out of the worker's
    event loop: the worker and every episode on it ended."""
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0,
                                        env="tests.rollout.test_worker_failures:ExitingEnv")
        run = asyncio.ensure_future(worker.run())
        for _ in range(200):
            await asyncio.sleep(0.05)
            if buffer.counters.groups_dropped_failed >= 2:
                break
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)  # the worker itself ends cleanly
        return buffer, worker

    buffer, worker = asyncio.run(main())
    assert buffer.counters.groups_dropped_failed >= 2  # it went on taking groups after the first exit
    assert buffer.last_error == "env_failed: env call step raised SystemExit: simulator gave up"
    # One failure per episode: a SystemExit of its own code recurs, so none is replayed.
    assert worker.counters["env_failures"] == worker.counters["episodes"] >= 2
    assert worker.counters["engine_failures"] == 0


BUILD_RELEASED = threading.Event()  # set at the end of the test below: hung constructors return


class BuildHangs(SlowCounter):
    """A simulator whose start never finishes (bounded, so no test waits for ever)."""

    def __init__(self, delay: float = 0.0):
        BUILD_RELEASED.wait(5)
        super().__init__(delay)


def test_an_env_whose_construction_hangs_fails_its_episode_not_the_worker(tiny_model_path):
    """The worker built envs on its event loop with no limit: one constructor that hung (a
    simulator that never came up) stopped every episode of the worker, and the trainer waited
    for ever. It is built off the loop, under the env call limit, like every env call."""
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0,
                                        env="tests.rollout.test_worker_failures:BuildHangs")
        worker.env_calls.timeout_s = 0.2
        run = asyncio.ensure_future(worker.run())
        try:
            for _ in range(400):
                await asyncio.sleep(0.05)
                if buffer.counters.groups_dropped_failed >= 1:
                    break
        finally:
            BUILD_RELEASED.set()
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return buffer, worker

    buffer, worker = asyncio.run(main())
    BUILD_RELEASED.clear()
    assert buffer.counters.groups_dropped_failed >= 1
    assert buffer.last_error == ("env_failed: env call make_text_env exceeded 0.2s "
                                 "(env_id 'tests.rollout.test_worker_failures:BuildHangs')")
    assert worker.counters["env_failures"] >= 4 and worker.counters["engine_failures"] == 0


class ArraySuccess(SlowCounter):
    """Puts a per-agent array where the worker reads a flag."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"success": np.array([True, False])}


def test_an_info_flag_without_a_truth_value_fails_the_env_not_the_engine(tiny_model_path):
    """bool(info["success"]) raised in the worker, outside the env call: the episode was an
    engine failure, retried with back-offs, and its healthy engine was marked dead."""
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0,
                                        env="tests.rollout.test_worker_failures:ArraySuccess")
        return await worker._episode(Ticket("g0", "count", 1, 2, 0), 0), worker

    traj, worker = asyncio.run(main())
    assert traj.status == "env_failed"
    assert "step: info['success'] must be a bool, got ndarray" in traj.error
    # Its own code's failure recurs: the episode is not replayed turn by turn (it was, 4 times).
    assert worker.counters["engine_failures"] == 0 and worker.counters["env_failures"] == 1


class SurrogateObservation(SlowCounter):
    """Tool output decoded with surrogateescape: a lone surrogate the tokenizer cannot encode."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs + " \udcff", reward, terminated, truncated, info


class TextSuccess(SlowCounter):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"success": "False"}


def test_text_the_tokenizer_cannot_take_or_a_text_flag_fails_the_env_not_the_engine(tiny_model_path):
    """A lone surrogate raised in the tokenizer, outside the env call: an engine failure, its
    healthy engine marked dead, 4 replays. A "False" success flag was read as True."""
    async def episode(env):
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0,
                                        env=f"tests.rollout.test_worker_failures:{env}")
        return await worker._episode(Ticket("g0", "count", 1, 2, 0), 0), worker.counters

    traj, counters = asyncio.run(episode("SurrogateObservation"))
    assert traj.status == "env_failed" and traj.deterministic
    assert "step: observation is not valid UTF-8 text (surrogates not allowed" in traj.error
    assert counters["engine_failures"] == 0 and counters["env_failures"] == 1
    traj, counters = asyncio.run(episode("TextSuccess"))
    assert traj.status == "env_failed" and "step: info['success'] must be a bool, got str 'False'" in traj.error


def test_a_request_the_engine_aborts_on_its_own_is_retried_not_trained_on(tiny_model_path):
    """An engine shutting down answers its held requests with finish_reason "abort" and
    the tokens made so far. The worker stored that cut reply as a turn, stepped the env
    with it and trained on it; it is now an engine failure, and the episode retries."""
    from roll_agentic.engine.protocol import GenerationResult

    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=1, delay=0.0)
        real = engine.engine.generate
        aborted: list[str] = []

        async def abort_once(token_ids, sampling, request_id):
            if not aborted:
                aborted.append(request_id)
                result = await real(token_ids, sampling, request_id)
                return GenerationResult(result.token_ids[:1], result.logprobs[:1], "abort", result.weight_version)
            return await real(token_ids, sampling, request_id)

        engine.engine.generate = abort_once
        run = asyncio.ensure_future(worker.run())
        [group] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return group, worker, aborted

    group, worker, aborted = asyncio.run(main())
    assert len(aborted) == 1 and worker.counters["engine_failures"] == 1
    for traj in group:
        assert traj.status == "ok" and all(t.finish_reason != "abort" for t in traj.turns)


def test_an_engine_asleep_past_the_request_limit_is_no_engine_failure(tiny_model_path):
    """An engine put to sleep (RollMux phase switches, weight syncs, `bench reliability`)
    holds its requests until the wake, and its host answers pings: it is alive. A request
    past the client's time limit while it slept failed like a dead engine's: counted as an
    engine failure, its engine marked dead, and the episode retried elsewhere (here, on the
    same sleeping engine, until out of retries). The limit counts time awake only."""
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=1, delay=0.0)
        worker.engine_clients[0].request_timeout_s = 1.0
        await engine.sleep()
        run = asyncio.ensure_future(worker.run())
        await asyncio.sleep(4.0)  # asleep for four limits: every request waits, none fails
        asleep = dict(worker.counters), buffer.counters.groups_dropped_failed
        await engine.wake()
        [group] = await asyncio.wait_for(buffer.get_batch(1, version=0), 60)
        await buffer.stop()
        await worker.stop()
        await asyncio.wait_for(run, 30)
        return asleep, group, worker

    (counters_asleep, dropped_asleep), group, worker = asyncio.run(main())
    assert counters_asleep["engine_failures"] == 0 and dropped_asleep == 0
    assert worker.counters["engine_failures"] == 0 and worker.engine_clients[0].timeouts == 0
    assert all(traj.status == "ok" and traj.restarts == 0 for traj in group)


class ResetRaises(SlowCounter):
    """`reset` fails: with a bug of its own (KeyError), or its simulator refusing the connection."""

    def reset(self, *, seed=None, options=None):
        if self.delay:  # env_kwargs delay != 0: the simulator is down
            raise ConnectionRefusedError(111, "Connection refused")
        return {}["level"]


def test_an_env_failure_says_whether_a_re_roll_would_meet_it_again(tiny_model_path):
    """Its own bug (or a broken contract) recurs, so the buffer stops the run at once on a
    run of them; a refused connection may pass and gets rollout.max_failing_s."""
    async def episode(delay, env):
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=delay,
                                        env=f"tests.rollout.test_worker_failures:{env}")
        return await worker._episode(Ticket("g0", "count", 1, 2, 0), 0)

    bug = asyncio.run(episode(0.0, "ResetRaises"))
    down = asyncio.run(episode(1.0, "ResetRaises"))
    contract = asyncio.run(episode(0.0, "ArraySuccess"))
    assert bug.status == "env_failed" and bug.deterministic and "KeyError: 'level'" in bug.error
    assert down.status == "env_failed" and not down.deterministic and "ConnectionRefusedError" in down.error
    assert contract.status == "env_failed" and contract.deterministic


class _HoldsTheSecondCall:
    """A buffer that issues one group, then holds every later call: the one group it
    waits for (the last place under the staleness bound) is the one that fails."""

    def __init__(self):
        self.calls = 0

    async def next_tickets(self, n):
        self.calls += 1
        if self.calls == 1:
            return [Ticket("g0", "count", 1, 2, 0)]
        await asyncio.Event().wait()  # only that group's completion could free a place


def test_a_worker_waiting_for_tickets_sees_its_own_group_fail(tiny_model_path):
    """Its groups' errors were read only between ticket calls: one that failed while the
    buffer held the call woke nothing, and the trainer waited for ever."""
    from tests.rollout.local_handle import LocalHandle

    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0)
        worker.buffer, worker.groups_in_flight = LocalHandle(_HoldsTheSecondCall()), 2

        async def fails(ticket):
            await asyncio.sleep(0.05)
            raise RuntimeError("put_many: the buffer actor is gone")

        worker._run_group = fails
        with pytest.raises(RuntimeError, match="the buffer actor is gone"):
            await asyncio.wait_for(worker.run(), 60)  # the bound only ends the old code's wait

    asyncio.run(main())


def test_a_reply_refused_here_leaves_its_engine_alive(tiny_model_path, monkeypatch):
    """NaN logprobs (Conversation.add_reply's ValueError) marked the engine that answered dead:
    every trajectory on it lost its stickiness until the watcher revived it."""
    from roll_agentic.rollout.conversation import Conversation

    def refused(self, *args, **kwargs):
        raise ValueError("a reply came with logprobs that are no log-probabilities: [nan]")

    monkeypatch.setattr(Conversation, "add_reply", refused)

    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.0)
        marked: list[int] = []
        worker.router._obj.mark_dead = marked.append
        return await worker._episode(Ticket("g0", "count", 1, 2, 0), 0), marked

    traj, marked = asyncio.run(main())
    assert traj.status == "engine_failed" and "no log-probabilities" in traj.error
    assert marked == []
