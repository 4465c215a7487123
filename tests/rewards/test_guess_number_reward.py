import pytest

from rewards.guess_number import reward


def _summary(success: bool, turns: int, invalid: int, consistent: int) -> dict:
    return {"success": success, "num_turns": turns, "num_invalid": invalid, "format_penalty": 0.1,
            "info": {"consistent_guesses": consistent, "guesses": turns - invalid}}


def test_a_binary_search_that_finds_the_number_scores_one():
    assert reward(_summary(True, 3, 0, 3)) == pytest.approx(1.0)


def test_hand_computed_mixes():
    # failed, 4 valid turns, 2 of them consistent: 0.2 * 2/4 + 0.1 * 1
    assert reward(_summary(False, 4, 0, 2)) == pytest.approx(0.2)
    # found on turn 4, one invalid reply, 2 consistent guesses: 0.7 + 0.2 * 2/4 + 0.1 * 3/4
    assert reward(_summary(True, 4, 1, 2)) == pytest.approx(0.7 + 0.1 + 0.075)


def test_a_summary_without_env_info_still_scores():
    s = _summary(True, 2, 0, 0)
    del s["info"]
    assert reward(s) == pytest.approx(0.8)


@pytest.mark.parametrize("info", [["x"], {"consistent_guesses": "n/a"}, None, {"consistent_guesses": -3}])
def test_junk_env_info_earns_no_consistency_credit_and_raises_nothing(info):
    """A custom env's info: a list, a non-number or a negative count raised before (frozenlake's did not)."""
    s = _summary(False, 4, 0, 0)
    s["info"] = info
    assert reward(s) == pytest.approx(0.1)
