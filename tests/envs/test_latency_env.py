"""LongTailEnv: the seed fixes the episode; latencies are heavy-tailed and capped."""

import pytest

from envs.latency_env import LongTailEnv
from envs.registry import make_text_env


def test_the_seed_fixes_turns_and_latencies():
    a, b = LongTailEnv(sleep=False), LongTailEnv(sleep=False)
    a.reset(seed=7)
    b.reset(seed=7)
    assert (a.turns, a.latencies) == (b.turns, b.latencies)
    lengths = set()
    for seed in range(40):
        a.reset(seed=seed)
        lengths.add(a.turns)
        assert a.min_turns <= a.turns <= a.max_turns and len(a.latencies) == a.turns
    assert len(lengths) > 3  # episodes differ in length


@pytest.mark.parametrize("distribution", ["lognormal", "pareto"])
def test_latencies_are_heavy_tailed_and_capped(distribution):
    env = LongTailEnv(min_turns=500, max_turns=500, latency_median_s=0.1, latency_cap_s=3.0,
                      distribution=distribution, sleep=False)
    env.reset(seed=0)
    lat = sorted(env.latencies)
    median, p99 = lat[len(lat) // 2], lat[int(0.99 * len(lat))]
    assert 0.07 < median < 0.14
    assert p99 > 5 * median  # the tail is long
    assert max(lat) <= 3.0


def test_an_episode_runs_to_its_drawn_length_and_scores_valid_moves():
    env = make_text_env("envs.latency_env:LongTailEnv", {"latency_median_s": 0.0})
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and info["turns"] == env.turns
    total, done, steps = 0.0, False, 0
    while not done:
        obs, r, done, truncated, info = env.step("4" if steps % 2 == 0 else "no idea")
        total += r
        steps += 1
        assert info["invalid_action"] == (steps % 2 == 0)
    assert steps == env.turns and not info["success"]  # half its replies were invalid
    assert total == pytest.approx(((env.turns + 1) // 2) / env.turns)


@pytest.mark.parametrize("reply, success", [("4", True), ("no idea", False)])
def test_success_is_finishing_with_every_move_valid(reply, success):
    """`success` was `done`: an episode of nothing but invalid replies counted as a success."""
    env = LongTailEnv(min_turns=3, max_turns=3, sleep=False)
    env.reset(seed=0)
    infos = [env.step(reply)[4] for _ in range(3)]
    assert [i["success"] for i in infos] == [False, False, success]
    env.reset(seed=0)  # a new episode starts its count afresh
    assert [env.step("4")[4]["success"] for _ in range(3)] == [False, False, True]
