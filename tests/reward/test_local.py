"""LocalRewardClient: what a reward function does to its call stays in that call's outcome."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.reward import LocalRewardClient
from tests.reward.reward_package import forget_package, write_reward_package

EXITS = """
import sys

def reward(summary):
    sys.exit(summary.get("code", 3))
"""
INTERRUPTS = """
def reward(summary):
    raise KeyboardInterrupt
"""


@pytest.fixture
def exitpkg(tmp_path, monkeypatch):
    yield write_reward_package(tmp_path, monkeypatch, "exitpkg", {"exits": EXITS, "interrupts": INTERRUPTS})
    forget_package("exitpkg")


def _score(package: str, function: str) -> list:
    async def main():
        client = LocalRewardClient(package=package, timeout_s=10)
        try:
            return [await client.score(function, {}), await client.score("healthy", {})]
        finally:
            await client.close()

    return asyncio.run(main())


def test_a_reward_that_calls_sys_exit_fails_its_call_not_the_worker(exitpkg):
    """Raised on the executor's thread and awaited, the SystemExit left score() and the event
    loop: the rollout worker ended with every episode on it."""
    exited, healthy = _score(exitpkg, "exits")
    assert not exited.ok and exited.value is None and exited.deterministic  # a retry exits again
    assert exited.error == ("exitpkg.exits: RewardExited: SystemExit(3) raised: a reward must return a number, "
                            "not call sys.exit()"), exited.error
    assert healthy.ok and healthy.value == 1.0  # the client goes on scoring


def test_a_keyboard_interrupt_still_stops_the_caller(exitpkg):
    """Ctrl-C is the user stopping the run, not the reward's failure: it is not swallowed."""
    with pytest.raises(KeyboardInterrupt):
        _score(exitpkg, "interrupts")
