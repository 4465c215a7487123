import math

import numpy as np

from roll_agentic.rollout.trajectory import Trajectory, json_scalars


def test_json_scalars_keeps_what_a_reward_function_can_receive():
    info = {"success": True, "guesses": np.int64(3), "ratio": np.float32(0.5), "name": "x",
            "board": np.zeros((2, 2)), "nan": math.nan, "obj": object()}
    assert json_scalars(info) == {"success": True, "guesses": 3, "ratio": 0.5, "name": "x"}
    assert json_scalars(None) == {}


def test_summary_carries_the_env_info():
    t = Trajectory("t", "g", "guess", 7, 0, env_info={"consistent_guesses": 2})
    assert t.summary()["info"] == {"consistent_guesses": 2}
