"""`roll-agentic bench serverless` end to end on a tiny workload."""

from __future__ import annotations

import json

import pytest

from roll_agentic.bench import serverless as bench


@pytest.mark.slow
def test_bench_prints_its_json_last(capsys):
    code = bench.main(["--trajectories", "4", "--window-s", "0.6", "--min-reward-ms", "20", "--max-reward-ms", "60",
                       "--warm-invokes", "20", "--cold-starts", "1", "--concurrency", "4", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert code == 0 and result["reward_failures"] == 0 and result["rewards_match"]
    for key in ("warm_invoke_p50_ms", "cold_start_ms", "reward_wait_fraction_serverless", "reward_wait_fraction_batch"):
        assert result[key] >= 0
    assert result["cold_start_ms"] > result["warm_invoke_p50_ms"]
    assert 0 <= result["reward_wait_fraction_serverless"] < 1 and 0 < result["reward_wait_fraction_batch"] < 1
