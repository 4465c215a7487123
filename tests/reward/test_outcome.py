"""parse_reward: what a reward function may return."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roll_agentic.reward.outcome import parse_reward


@pytest.mark.parametrize("result, value", [
    (np.float32(0.5), 0.5),
    (np.float64(-1.25), -1.25),
    (np.int64(2), 2.0),
    (np.array(0.75), 0.75),
    ({"reward": np.float32(0.25)}, 0.25),
    ({"reward": np.array(3)}, 3.0),
    (Fraction(1, 4), 0.25),
    (1, 1.0),
    (0.5, 0.5),
])
def test_numbers_of_any_real_type_are_rewards(result, value):
    """numpy scalars and 0-d arrays, what numpy-computed rewards return, failed every trajectory."""
    assert parse_reward(result) == (value, "")


@pytest.mark.parametrize("result, says", [
    (np.float32("nan"), "not finite: nan"),
    ({"reward": np.float64("inf")}, "not finite: inf"),
    (np.array(float("nan")), "not finite: nan"),
    (10**400, "not finite"),
    (True, "not a number: True"),
    (np.bool_(False), "not a number: False"),
    (np.array([1.0]), "not a number"),
    ("1", "not a number"),
    (None, "not a number: None"),
    (1 + 2j, "not a number"),
])
def test_what_is_no_finite_real_number_is_refused(result, says):
    value, why = parse_reward(result)
    assert value is None and says in why, why
