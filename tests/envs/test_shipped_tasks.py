from envs.frozenlake import FrozenLakeText, parse_move
from envs.guess_number import GuessNumber


def test_frozenlake_reaches_goal_on_the_fixed_map():
    env = FrozenLakeText(size=3)
    obs, _ = env.reset(seed=1)
    assert obs.startswith("P . H")
    for move in ["down", "down", "right"]:
        _, reward, terminated, _, info = env.step(move)
    _, reward, terminated, _, info = env.step("right")
    assert terminated and reward == 1.0 and info["success"]


def test_frozenlake_hole_ends_without_success():
    env = FrozenLakeText(size=3)
    env.reset(seed=0)
    env.step("right")
    _, reward, terminated, _, info = env.step("right")  # (0,2) is the hole
    assert terminated and reward == 0.0 and not info["success"]


def test_parse_move():
    assert parse_move("I will go LEFT now") == 0
    assert parse_move("upward") is None


def test_guess_number_feedback_and_success():
    env = GuessNumber(low=1, high=8)
    env.reset(seed=5)
    secret = env._secret
    low_guess = 1 if secret > 1 else 2
    obs, *_ = env.step(str(low_guess))
    assert ("higher" in obs) == (secret > low_guess)
    _, reward, terminated, _, info = env.step(f"my guess: {secret}")
    assert terminated and reward == 1.0 and info["success"]
    _, _, _, _, info = GuessNumber().step("nine")
    assert info["invalid_action"]


def test_guess_number_counts_guesses_consistent_with_the_hints():
    env = GuessNumber(low=1, high=8)
    env.reset(seed=0)
    env._secret = 6  # fixed for the test: hints are higher after 3, lower after 7
    _, _, _, _, info = env.step("3")  # consistent: anything in 1..8 is
    assert (info["guesses"], info["consistent_guesses"]) == (1, 1)
    _, _, _, _, info = env.step("2")  # ignores "higher than 3"
    assert (info["guesses"], info["consistent_guesses"]) == (2, 1)
    _, _, _, _, info = env.step("7")  # inside 4..8
    assert (info["guesses"], info["consistent_guesses"]) == (3, 2)
    _, _, _, _, info = env.step("?")  # invalid: not a guess at all
    assert info["invalid_action"] and (info["guesses"], info["consistent_guesses"]) == (3, 2)
    _, reward, terminated, _, info = env.step("6")  # inside 4..6, and right
    assert terminated and reward == 1.0 and (info["guesses"], info["consistent_guesses"]) == (4, 3)
    _, info = env.reset(seed=1)
    assert (info["guesses"], info["consistent_guesses"]) == (0, 0)
