import pytest

from envs.frozenlake import FrozenLakeText
from rewards.frozenlake import reward


def _summary(success: bool, turns: int, invalid: int, progress: float | None) -> dict:
    s = {"success": success, "num_turns": turns, "num_invalid": invalid, "format_penalty": 0.1}
    if progress is not None:
        s["info"] = {"progress": progress}
    return s


def test_reaching_the_goal_with_clean_moves_scores_one():
    assert reward(_summary(True, 4, 0, 1.0)) == pytest.approx(1.0)


def test_hand_computed_mixes():
    # walked into the hole with two clean moves: format credit only
    assert reward(_summary(False, 2, 0, 0.0)) == pytest.approx(0.1)
    # bumped into walls for 8 clean turns, never left the start: the same
    assert reward(_summary(False, 8, 0, 0.0)) == pytest.approx(0.1)
    # halfway to the goal after 8 turns, 2 of them invalid: 0.1 * 0.5 + 0.1 * 6/8
    assert reward(_summary(False, 8, 2, 0.5)) == pytest.approx(0.125)
    # goal on turn 6 with 2 invalid replies: 0.8 + 0.1 + 0.1 * 4/6
    assert reward(_summary(True, 6, 2, 1.0)) == pytest.approx(0.9 + 0.4 / 6)


def test_no_episode_short_of_the_goal_comes_near_one_that_reaches_it():
    best_miss = reward(_summary(False, 8, 0, 0.75))  # next to the goal, every move clean
    worst_hit = reward(_summary(True, 8, 7, 1.0))  # reached it with one clean move of 8
    assert best_miss == pytest.approx(0.175) and worst_hit - best_miss > 0.7


def test_a_summary_without_env_info_still_scores():
    assert reward(_summary(False, 4, 1, None)) == pytest.approx(0.075)
    assert reward(_summary(True, 4, 0, None)) == pytest.approx(1.0)


def test_the_env_reports_progress_and_a_hole_forfeits_it():
    env = FrozenLakeText(size=3)
    _, info = env.reset(seed=0)
    assert info["progress"] == 0.0
    seen = [env.step(m)[4]["progress"] for m in ("down", "?", "right", "down")]
    assert seen == [0.25, 0.25, 0.5, 0.75]  # an invalid reply leaves it where it was
    env.reset(seed=0)
    assert env.step("right")[4]["progress"] == 0.25
    assert env.step("right")[4]["progress"] == 0.0  # (0,2) is the hole


def test_junk_progress_earns_nothing_instead_of_failing():
    for junk in ("far", None, float("nan"), [1]):
        assert reward({**_summary(False, 4, 0, 0.0), "info": {"progress": junk}}) == pytest.approx(0.1)
    assert reward(_summary(False, 4, 0, 7.0)) == pytest.approx(0.2)  # clipped to 1
    assert reward({**_summary(False, 4, 0, 0.0), "info": ["not", "a", "dict"]}) == pytest.approx(0.1)
