"""A newcomer's own env gets its shapes or spaces wrong: one message that names the fix.

The envs below are real gymnasium envs with the mistakes people make; they are
built by `module:Class` exactly as a task's env_id would name them.
"""

import gymnasium as gym
import pytest
from gymnasium import spaces

from envs.checker import check_env
from envs.registry import EnvSpecError, make_text_env
from roll_agentic.rollout.env_contract import EnvContractError

HERE = __name__


class ForgotTheSpaces(gym.Env):
    def reset(self, *, seed=None, options=None):
        return "start", {}

    def step(self, action):
        return "done", 0.0, True, False, {}


class TextActionsIntObservations(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Discrete(4)
        self.action_space = spaces.Text(16)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, True, False, {}


class ResetReturnsBareText(gym.Env):
    """The old gym API: reset returned the observation alone."""

    def __init__(self):
        self.observation_space = spaces.Text(64)
        self.action_space = spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return "hello there"

    def step(self, action):
        return "x", 0.0, True, False, {}


class OldGymDiscrete(gym.Env):
    """The old gym API on a Discrete env: reset gives an int, step a 4-tuple."""

    def __init__(self):
        self.observation_space = spaces.Discrete(3)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0

    def step(self, action):
        return 1, 0.0, True, {}


class DiscreteStepRewardIsText(gym.Env):
    def __init__(self):
        self.observation_space = spaces.Discrete(3)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 1, "1.0", True, False, {}


def test_an_env_without_spaces_is_told_to_declare_them():
    # was: "constructing ... raised AttributeError", as if __init__ were broken
    with pytest.raises(EnvSpecError, match="declares no observation_space and no action_space; set them"):
        make_text_env(f"{HERE}:ForgotTheSpaces")


def test_text_actions_with_non_text_observations_blame_the_observation_space():
    # was: "has action space Text(...); ... needs text actions", blaming the one part that was right
    with pytest.raises(EnvSpecError, match=r"has text actions but observation space Discrete\(4\)"):
        make_text_env(f"{HERE}:TextActionsIntObservations")


def test_checker_reports_a_bare_reset_as_the_contract_it_breaks():
    # was: "reset(seed=0) raised ValueError: too many values to unpack (expected 2)"
    results = {r.name: r for r in check_env(f"{HERE}:ResetReturnsBareText")}
    assert not results["reset types"].ok
    assert results["reset types"].detail == (
        "reset must return (observation: str, info: dict), got str 'hello there'")


def test_adapter_names_the_wrapped_env_and_the_gymnasium_api():
    env = make_text_env(f"{HERE}:OldGymDiscrete")
    # was: TypeError "cannot unpack non-iterable int object", from inside the adapter
    with pytest.raises(EnvContractError, match=r"OldGymDiscrete.reset must return \(observation, info\)"):
        env.reset(seed=0)
    env = make_text_env(f"{HERE}:DiscreteStepRewardIsText")
    env.reset(seed=0)
    # was: ValueError "could not convert string to float: '1.0'"
    with pytest.raises(EnvContractError, match="DiscreteStepRewardIsText.step: reward must be a number"):
        env.step("1")


def test_a_well_formed_discrete_env_still_passes_every_check():
    assert all(r.ok for r in check_env("CliffWalking-v1")), check_env("CliffWalking-v1")


class OldGymStep(gym.Env):
    """A text env on the old gym API's step: (observation, reward, done, info)."""

    def __init__(self):
        self.observation_space = spaces.Text(64)
        self.action_space = spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return "start", {}

    def step(self, action):
        return "moved", 0.0, False, {}


class BreaksOnTheThirdStep(OldGymStep):
    def reset(self, *, seed=None, options=None):
        self.t = 0
        return "start", {}

    def step(self, action):
        self.t += 1
        if self.t == 3:
            raise RuntimeError("the simulator lost its connection")
        return "moved", 0.0, False, False, {"invalid_action": True}

    def close(self):
        raise RuntimeError("already closed")


def test_checker_reports_an_env_that_breaks_past_the_first_step_instead_of_raising():
    # was: check_env (so `roll-agentic env check`) ended in a traceback: "ValueError: not enough
    # values to unpack (expected 5, got 4)" or the env's own error, and no check was printed
    results = {r.name: r for r in check_env(f"{HERE}:OldGymStep")}
    assert not results["step types"].ok
    assert not results["determinism"].ok
    assert "step must return (observation, reward, terminated, truncated, info)" in results["determinism"].detail
    results = {r.name: r for r in check_env(f"{HERE}:BreaksOnTheThirdStep")}
    assert results["step types"].ok and results["unparseable reply"].ok
    assert not results["determinism"].ok
    assert "RuntimeError: the simulator lost its connection" in results["determinism"].detail
    assert not results["close"].ok and results["close"].detail == "close() raised RuntimeError: already closed"


class NamedActions(gym.Env):
    """A Discrete(2) env naming its actions; `names` set per subclass."""

    names = ["LEFT", "RIGHT"]

    def __init__(self):
        self.observation_space = spaces.Discrete(3)
        self.action_space = spaces.Discrete(2)

    def get_action_meanings(self):
        return list(self.names)

    def reset(self, *, seed=None, options=None):
        self.pos = 1
        return self.pos, {}

    def step(self, action):
        self.pos = max(0, min(2, self.pos + (1 if action == 1 else -1)))
        return self.pos, float(self.pos == 2), self.pos == 2, False, {}


class ThreeNamesForTwoActions(NamedActions):
    names = ["LEFT", "RIGHT", "STAY"]


class NamesEqualButForCase(NamedActions):
    names = ["MOVE", "move"]


class AnObjectForAnObservation(NamedActions):
    def reset(self, *, seed=None, options=None):
        return object(), {}

    def step(self, action):
        return object(), 0.0, False, False, {}


def test_action_names_of_the_wrong_count_or_equal_but_for_case_fail_the_round_trip():
    """Both passed before: the wrong count fell back to index names without a word."""
    assert all(r.ok for r in check_env(f"{HERE}:NamedActions"))
    trip = {r.name: r for r in check_env(f"{HERE}:ThreeNamesForTwoActions")}["text round trip"]
    assert not trip.ok and "get_action_meanings() returned 3 names for Discrete(2)" in trip.detail
    trip = {r.name: r for r in check_env(f"{HERE}:NamesEqualButForCase")}["text round trip"]
    assert not trip.ok and "['move'] repeat when case is ignored" in trip.detail


def test_an_observation_with_no_text_form_fails_naming_the_fix():
    """Before, it passed (the address repeated) or failed as a seeding problem (it did not)."""
    result = {r.name: r for r in check_env(f"{HERE}:AnObjectForAnObservation")}["observation text"]
    assert not result.ok and "memory address" in result.detail and "render()" in result.detail
