"""A quick run of `bench rollout` with tiny sizes: both modes finish the same work, JSON comes out."""

import json

from roll_agentic.bench.rollout import (
    RolloutBenchConfig,
    main,
    run_bench,
    ticket_seeds,
    workload_profile,
)


def test_both_modes_roll_out_the_same_seeded_episodes(tiny_model_path):
    cfg = RolloutBenchConfig(episodes=4, concurrency=2, min_turns=1, max_turns=3, latency_median_s=0.005,
                             latency_cap_s=0.05, max_new_tokens=2, model_path=tiny_model_path)
    out = run_bench(cfg)
    assert out["sync"]["trajectories"] == out["async"]["trajectories"] == 4
    assert out["sync"]["failures"] == out["async"]["failures"] == 0
    assert out["same_turns"]  # the seeds fix every episode's length, whatever the schedule
    assert out["async_vs_sync"] > 0 and out["backend"] == "hf"


def test_the_workload_is_fixed_by_the_seeds():
    import asyncio

    cfg = RolloutBenchConfig(episodes=8, concurrency=4)
    seeds = asyncio.run(ticket_seeds(cfg))
    assert seeds == asyncio.run(ticket_seeds(cfg))
    assert len(seeds) == 8 and seeds[0][1] == seeds[1][1]  # a GRPO group shares its seed
    assert workload_profile(cfg, seeds) == workload_profile(cfg, seeds)


def test_cli_prints_the_ratio_as_json_on_the_last_line(tiny_model_path, capsys):
    rc = main(["--json", "--episodes", "2", "--concurrency", "2", "--max-turns", "1", "--min-turns", "1",
               "--latency-median-s", "0", "--max-new-tokens", "1", "--model-path", tiny_model_path])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 0 and "async_vs_sync" in json.loads(last)
