"""A run whose every group fails stops: at once for a bug of the task's own code, after
rollout.max_failing_s for what may pass (an engine or the emulator restarting)."""

import asyncio
import types

import pytest

from roll_agentic.rollout.buffer import RolloutFailing, TaskShare, TrajectoryBuffer
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from tests.rollout.test_buffer import _traj

REWARD_BUG = "roll-agentic-scoring: function error (Unhandled) KeyError: 'summary'"
SHARE = TaskShare("count", 1.0, 4, env_id="my_pkg.env:Counter", env_kwargs={"n": 3}, reward="my_pkg.scoring",
                  reward_function="roll-agentic-scoring", reward_state_dir="outputs/run/serverless")


def _failed(ticket, i, status="reward_failed", error=REWARD_BUG, deterministic=True):
    t = _traj(ticket, i, 0, reward=None, status=status)
    t.error, t.deterministic = error, deterministic
    return t


async def _groups(buf, n, make):
    """`n` groups handed in, `make(ticket, i)` each episode."""
    for _ in range(n):
        tk = await buf.next_ticket()
        await buf.put_many([make(tk, i) for i in range(tk.group_size)])


async def _batch_or_error(buf, timeout=0.3):
    """get_batch's error, or None if it is still waiting after `timeout`."""
    try:
        await asyncio.wait_for(buf.get_batch(1, version=buf.state.version), timeout)
    except RolloutFailing as err:
        return str(err)
    except TimeoutError:
        return None
    raise AssertionError("a batch of failed groups")


def test_a_reward_that_raises_on_every_episode_stops_the_run_at_once_naming_the_cause():
    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0)
        assert buf.max_failing_s == 300.0  # not what ends it
        await _groups(buf, buf.max_failed_in_a_row - 1, _failed)
        assert await _batch_or_error(buf) is None  # one short: still rolled again
        assert buf.failing()["deterministic_in_a_row"] == buf.max_failed_in_a_row - 1
        await _groups(buf, 1, _failed)
        return await _batch_or_error(buf, timeout=2), buf

    error, buf = asyncio.run(main())
    assert error is not None and error.startswith(
        f"task 'count': every episode of the last {buf.max_failed_in_a_row} groups failed, none succeeded, "
        f"with an error of the task's own code: reward_failed: {REWARD_BUG}. A re-roll meets it again, so "
        "the run stops now (rollout.max_failing_s = 300 s")
    assert "Fix my_pkg/scoring.py" in error
    assert error.endswith("if it raised, the traceback is in outputs/run/serverless/logs/roll-agentic-scoring.log")


def test_an_env_that_raises_names_the_env_check_to_run():
    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0)
        await _groups(buf, buf.max_failed_in_a_row, lambda tk, i: _failed(
            tk, i, "env_failed", "env call reset raised TypeError: bad seed"))
        return await _batch_or_error(buf, timeout=2)

    error = asyncio.run(main())
    assert "env_failed: env call reset raised TypeError: bad seed" in error
    assert error.endswith("""Check the env with `roll-agentic env check my_pkg.env:Counter --kwargs '{"n": 3}'`""")


@pytest.mark.parametrize("status, deterministic", [
    ("engine_failed", False),  # an engine restarting
    ("reward_failed", False),  # the emulator down: connection refused, 5xx, time-outs
    ("env_failed", False),  # an env call past its time limit
])
def test_failures_that_may_pass_wait_out_the_window(status, deterministic):
    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0, max_failing_s=300.0)
        await _groups(buf, 3 * buf.max_failed_in_a_row, lambda tk, i: _failed(
            tk, i, status, "EndpointConnectionError: Could not connect", deterministic))
        early = await _batch_or_error(buf)
        assert buf.failing()["deterministic_in_a_row"] == 0
        buf.max_failing_s = 0.01  # as if they had failed for the whole window
        await asyncio.sleep(0.02)
        return early, await _batch_or_error(buf, timeout=2), buf

    early, late, buf = asyncio.run(main())
    assert early is None
    assert late.startswith(f"{3 * buf.max_failed_in_a_row} groups in a row failed (every episode in them lost), "
                           "failing for 0 s (rollout.max_failing_s = 0.01); failed trajectories by "
                           f"cause: {status} {12 * buf.max_failed_in_a_row}; last error: {status}: EndpointConnectionError")


def test_the_window_counts_failing_time_not_time_since_the_last_success(monkeypatch):
    """A training step longer than the window, then an engine restarting after the weight
    sync: its first failed groups stopped the run at once ("none succeeded for 360 s")."""
    import roll_agentic.rollout.buffer as buffer_mod

    clock = [1000.0]
    # The buffer's own clock only: asyncio's (time.monotonic itself) must keep running.
    monkeypatch.setattr(buffer_mod, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))

    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0, max_failing_s=300.0)
        await _groups(buf, 1, lambda tk, i: _traj(tk, i, 0, reward=float(i % 2)))
        assert len(await buf.get_batch(1, version=0)) == 1
        await buf.advance(1)
        clock[0] += 360.0  # a 6-minute training step since that success
        await _groups(buf, buf.max_failed_in_a_row, lambda tk, i: _failed(
            tk, i, "engine_failed", "ActorDiedError", False))
        early = await _batch_or_error(buf), buf.failing()["failing_for_s"]
        clock[0] += 301.0  # now failing for longer than the window
        return early, await _batch_or_error(buf, timeout=2)

    (error, failing_s), late = asyncio.run(main())
    assert error is None and failing_s == 0.0
    assert late.startswith("16 groups in a row failed (every episode in them lost), failing for 301 s")


def test_one_episode_that_succeeds_or_fails_for_a_passing_cause_restarts_the_count():
    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0)
        n = buf.max_failed_in_a_row
        await _groups(buf, n - 1, _failed)
        # A failed group (one good episode is not two), but one episode worked: the code can.
        await _groups(buf, 1, lambda tk, i: _traj(tk, i, 0) if i == 0 else _failed(tk, i))
        assert (buf.failing()["failed_in_a_row"], buf.failing()["deterministic_in_a_row"]) == (n, 0)
        await _groups(buf, n - 1, _failed)
        assert await _batch_or_error(buf) is None
        # One episode lost to an engine restart: that group may say nothing about the code.
        await _groups(buf, 1, lambda tk, i: _failed(tk, i, "engine_failed", "ActorDiedError", False)
                      if i == 0 else _failed(tk, i))
        await _groups(buf, n - 1, _failed)
        assert await _batch_or_error(buf) is None
        # A group that completes resets both counts.
        await _groups(buf, 1, lambda tk, i: _traj(tk, i, 0, reward=float(i % 2)))
        assert buf.failing()["failed_in_a_row"] == 0 and buf.failing()["deterministic_in_a_row"] == 0
        assert len(await buf.get_batch(1, version=0)) == 1
        await buf.advance(1)  # the step trained: the next step's tickets open
        await _groups(buf, n, _failed)
        return await _batch_or_error(buf, timeout=2)

    assert asyncio.run(main()).startswith("task 'count': every episode of the last 16 groups failed")


def test_wait_status_says_how_close_the_run_is_to_either_stop():
    async def main():
        buf = TrajectoryBuffer([SHARE], groups_per_step=1, alpha=0, max_failing_s=120.0)
        await _groups(buf, 3, _failed)
        return buf.wait_status()

    st = asyncio.run(main())
    assert (st["failed_in_a_row"], st["deterministic_in_a_row"], st["max_failed_in_a_row"]) == (3, 3, 16)
    assert st["max_failing_s"] == 120.0 and st["failing_for_s"] >= 0.0


def test_tail_batching_stops_at_once_too():
    async def main():
        buf = TailBatchingBuffer([SHARE], groups_per_step=2, eta=1.0)
        for _ in range(buf.max_failed_in_a_row):
            t = await buf.next_ticket()
            await buf.put_many([_failed(t, i) for i in range(t.group_size)])
        errors = []
        for wait in (buf.get_batch(2, 0), buf.take_ready(0)):
            with pytest.raises(RolloutFailing) as err:
                await asyncio.wait_for(wait, 2)
            errors.append(str(err.value))
        return errors

    for error in asyncio.run(main()):
        assert error.startswith("task 'count': every episode of the last 16 groups failed")
