"""In-process rewards that never return: each costs a thread (threads cannot be killed),
never the client's capacity, and past a bound their calls fail saying what to do."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roll_agentic.reward import LocalRewardClient
from tests.reward.reward_package import write_reward_package

HANGS = """
import threading

RELEASE = threading.Event()  # set by the test's teardown: the stuck threads end

def reward(summary):
    RELEASE.wait()
    return 0.0
"""


@pytest.fixture
def hungpkg(tmp_path, monkeypatch):
    yield write_reward_package(tmp_path, monkeypatch, "hungpkg", {"hangs": HANGS})
    hangs = sys.modules.pop("hungpkg.hangs", None)
    if hangs is not None:
        hangs.RELEASE.set()
    for name in ("hungpkg.healthy", "hungpkg"):
        sys.modules.pop(name, None)


def test_rewards_that_never_return_do_not_stop_later_calls(hungpkg):
    """Before: after max_concurrency hung calls every thread was stuck and each later
    call of any reward timed out, while the run went on learning nothing."""
    async def main():
        client = LocalRewardClient(max_concurrency=2, package=hungpkg, timeout_s=0.2)
        hung = await asyncio.gather(*(client.score("hangs", {}) for _ in range(3)))  # > max_concurrency
        healthy = await asyncio.gather(*(client.score("healthy", {}) for _ in range(4)))
        await client.close()
        return hung, healthy

    hung, healthy = asyncio.run(main())
    assert all(not o.ok and "timed out after 0.2s" in o.error for o in hung)
    assert all(o.ok and o.value == 1.0 for o in healthy), [o.error for o in healthy]


def test_calls_aborted_while_their_reward_hangs_free_their_threads_too(hungpkg):
    """An episode aborted mid-reward (a round closed) cancels the call before its limit: its
    thread used to stay counted, and two such calls wedged a pool of two with no warning."""
    async def main():
        client = LocalRewardClient(max_concurrency=2, package=hungpkg, timeout_s=0.3)
        for _ in range(2):
            call = asyncio.ensure_future(client.score("hangs", {}))
            await asyncio.sleep(0.05)
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
        healthy = await asyncio.gather(*(client.score("healthy", {}) for _ in range(3)))
        await client.close()
        return healthy

    healthy = asyncio.run(main())
    assert all(o.ok and o.value == 1.0 for o in healthy), [o.error for o in healthy]


def test_past_the_bound_calls_of_a_hung_reward_fail_at_once_saying_what_to_do(hungpkg, caplog):
    async def main():
        client = LocalRewardClient(max_concurrency=2, package=hungpkg, timeout_s=0.2)  # bound: 4 threads
        timed_out = [await client.score("hangs", {}) for _ in range(4)]
        refused = await client.score("hangs", {})
        healthy = await client.score("healthy", {})  # a function that left no thread runs on
        await client.close()
        return timed_out, refused, healthy

    with caplog.at_level(logging.WARNING, logger="roll_agentic.reward.local"):
        timed_out, refused, healthy = asyncio.run(main())
    assert all("timed out" in o.error for o in timed_out)
    assert not refused.ok and refused.value is None
    assert "hungpkg.hangs: not called: 4 of its calls never returned" in refused.error
    assert "reward.mode=serverless" in refused.error and "Fix rewards/hangs.py" in refused.error
    assert healthy.ok and healthy.value == 1.0
    left = [r.getMessage() for r in caplog.records if "left on its thread" in r.getMessage()]
    assert len(left) == 1 and "hungpkg.hangs" in left[0] and "0.2s limit" in left[0]  # once, not per call


def test_a_process_with_a_stuck_reward_still_exits(hungpkg, tmp_path):
    """The stuck thread is a daemon and close() joins nothing: a run that ends does not hang on it."""
    code = textwrap.dedent("""
        import asyncio
        from roll_agentic.reward import LocalRewardClient

        async def main():
            client = LocalRewardClient(package="hungpkg", timeout_s=0.2)
            out = await client.score("hangs", {})
            await client.close()
            print(out.error)

        asyncio.run(main())
    """)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"})
    assert done.returncode == 0, done.stderr
    assert "timed out after 0.2s" in done.stdout
