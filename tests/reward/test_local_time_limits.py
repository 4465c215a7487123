"""In-process rewards under a time limit: scored as the serverless path scores them."""

from __future__ import annotations

import asyncio

from roll_agentic.reward import LocalRewardClient

LOOPS = "def f(x):\n    while x:\n        pass\n    return 1\n"
BUDGETED = """
LAMBDA_TIMEOUT_S = 1

def reward(summary):
    return 0.0

def handler(event, context):
    return {"reward": context.get_remaining_time_in_millis() / 1000.0}
"""


def test_code_that_runs_past_the_adaptive_limit_scores_0_not_a_failed_reward():
    """RollPacker: a test over T = min(max(2 s, 1.5 x slowest correct run), 30 s) scores 0.
    Called without its deadline, code_exec's two looping tests (2 s each) outran the
    client's timeout: the trajectory failed and was left out of its batch, so looping
    code was never trained on its 0."""
    async def main():
        client = LocalRewardClient(timeout_s=1.0)
        out = await client.score("code_exec", {"code": LOOPS, "tests": ["f(1)", "assert f(0) == 1", "f(2)"]})
        await client.close()
        return out

    out = asyncio.run(main())
    assert out.ok and out.error == "", out.error
    assert out.value == 1 / 3  # the passing test counts, the two that ran out their 2 s score 0
    assert 4.0 <= out.latency_s < 30.0  # two limits at the 2 s floor, not the 30 s ceiling


def test_a_reward_gets_its_declared_time_and_is_told_what_is_left(tmp_path, monkeypatch):
    pkg = tmp_path / "budgetpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "budgeted.py").write_text(BUDGETED)
    monkeypatch.syspath_prepend(str(tmp_path))

    async def main():
        short = LocalRewardClient(package="budgetpkg", timeout_s=0.2)  # below the module's own 1 s
        long = LocalRewardClient(package="budgetpkg", timeout_s=5.0)  # above it: the client's stands
        out = await short.score("budgeted", {}), await long.score("budgeted", {})
        await short.close()
        await long.close()
        return out

    short, long = asyncio.run(main())
    assert short.ok and 0.5 < short.value <= 1.0
    assert long.ok and 4.5 < long.value <= 5.0
