"""The new reward functions deployed to the emulator and scored through the reward client."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.config import RewardConfig
from roll_agentic.reward import LocalRewardClient, LocalServerless, ServerlessRewardClient


@pytest.mark.slow
def test_code_exec_and_reward_model_run_the_same_in_the_emulator(tmp_path):
    summaries = {
        "code_exec": {"code": "def sq(x):\n    return x * x\n", "tests": ["assert sq(3) == 9", "assert sq(2) == 5"]},
        "reward_model": {"text": "a trajectory that solved the puzzle in four moves"},
    }
    with LocalServerless() as svc:
        url = svc.start(tmp_path / "state")
        cfgs = svc.deploy_rewards(url, list(summaries), RewardConfig(mode="serverless"))
        assert {c["FunctionName"]: c["MemorySize"] for c in cfgs} == {"roll-agentic-code_exec": 512, "roll-agentic-reward_model": 1024}

        async def main():
            remote = ServerlessRewardClient(url, max_retries=1)
            local = LocalRewardClient()
            out = {}
            for name, summary in summaries.items():
                first = await remote.score(name, summary)
                warm = await remote.score(name, summary)
                here = await local.score(name, summary)
                out[name] = (first, warm, here)
            await remote.close()
            await local.close()
            return out

        out = asyncio.run(main())
    for name, (first, warm, here) in out.items():
        assert first.ok and warm.ok and here.ok, (name, first.error, warm.error, here.error)
        assert first.cold_start and not warm.cold_start
        assert first.value == pytest.approx(here.value, abs=1e-6) == warm.value
    assert out["code_exec"][0].value == 0.5
