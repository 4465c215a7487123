"""TailTurnsEnv: episode lengths are long-tailed; a step can be made to wait like a tool call."""

import statistics
import time

import pytest

from envs.tail_turns import TailTurnsEnv


def test_lengths_are_long_tailed_per_step_of_eight_prompts_by_four_responses():
    env = TailTurnsEnv(prompt_sigma=1.0, response_sigma=1.8)  # the bench's defaults
    ratios = []
    for step in range(200):
        turns = [env.draw_turns(step * 8 + p, r) for p in range(8) for r in range(4)]
        ratios.append(max(turns) / statistics.median(turns))
    assert 20 <= statistics.median(ratios) <= 30  # RollPacker measured 25-32x
    assert all(1 <= env.draw_turns(s, 0) <= env.max_turns for s in range(500))


def test_an_episode_lasts_its_drawn_turns_and_scores_valid_moves():
    env = TailTurnsEnv()
    _, info = env.reset(seed=7, options={"response": 0})
    assert info["turns"] == env.draw_turns(7, 0)
    done, steps, reward = False, 0, 0.0
    while not done:
        _, reward, done, _, _ = env.step("3" if steps % 2 == 0 else "x")
        steps += 1
    assert steps == info["turns"] and reward == pytest.approx(((steps + 1) // 2) / steps)


def test_step_latency_makes_each_step_wait():
    env = TailTurnsEnv(step_latency_s=0.05)
    env.reset(seed=1)
    t = time.perf_counter()
    env.step("1")
    assert time.perf_counter() - t >= 0.05
    with pytest.raises(ValueError, match="step_latency_s must be >= 0"):
        TailTurnsEnv(step_latency_s=-1)


def test_a_prompts_responses_are_numbered_by_seed_whichever_instance_plays_them():
    # Pooled env instances play a group's episodes in any order: the lengths must not depend on it.
    a, b = TailTurnsEnv(prompt_sigma=1.0, response_sigma=1.8), TailTurnsEnv(prompt_sigma=1.0, response_sigma=1.8)
    seed = 987_654_321  # not reset anywhere else in this process
    turns = [env.reset(seed=seed)[1]["turns"] for env in (a, b, b, a)]
    assert turns == [a.draw_turns(seed, r) for r in range(4)]
    assert a.reset(seed=seed, options={"response": 1})[1]["turns"] == a.draw_turns(seed, 1)  # explicit wins
