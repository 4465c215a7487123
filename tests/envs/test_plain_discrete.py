"""A Discrete-action env written as a plain class (no gym.Env subclass) is adapted.

Text envs of plain classes were accepted, but the adapter read `env.unwrapped` and
`env.spec`, which only gym.Env has: `env check` called the AttributeError a
constructor failure.
"""

import pytest
from gymnasium import spaces

from envs.adapter import DiscreteTextAdapter
from envs.checker import check_env
from envs.registry import make_text_env
from roll_agentic.rollout.env_contract import EnvContractError

HERE = __name__


class PlainWalk:
    """A walk on 0..3: reach 3. No gym.Env, no spec, no unwrapped."""

    def __init__(self):
        self.observation_space = spaces.Discrete(4)
        self.action_space = spaces.Discrete(2)
        self.pos = 0

    def reset(self, *, seed=None, options=None):
        self.pos = 0
        return self.pos, {}

    def step(self, action):
        self.pos = max(0, min(3, self.pos + (1 if action == 1 else -1)))
        return self.pos, float(self.pos == 3), self.pos == 3, False, {}


class PlainNamedWalk(PlainWalk):
    def get_action_meanings(self):
        return ["BACK", "FORWARD"]


class PlainOldGymStep(PlainWalk):
    def step(self, action):
        return self.pos, 0.0, False, {}


def test_a_plain_discrete_class_builds_and_steps():
    env = make_text_env(f"{HERE}:PlainWalk")  # was: AttributeError 'PlainWalk' ... 'unwrapped'
    assert isinstance(env, DiscreteTextAdapter)
    assert env.names == ["0", "1"]  # no spec, no meanings: index names
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("1")
    assert obs.startswith("1") and reward == 0.0 and not terminated and info == {}


def test_a_plain_class_names_its_actions_by_its_own_meanings():
    env = DiscreteTextAdapter(PlainNamedWalk())
    assert env.names == ["back", "forward"]
    assert env.parse_action("go forward") == 1


def test_env_check_passes_a_plain_discrete_class():
    results = check_env(f"{HERE}:PlainWalk")
    assert all(r.ok for r in results), results
    results = {r.name: r for r in check_env(f"{HERE}:PlainNamedWalk")}
    assert results["text round trip"].ok, results


def test_a_plain_class_breaking_the_contract_is_named_by_its_class():
    env = DiscreteTextAdapter(PlainOldGymStep())
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"PlainOldGymStep\.step must return"):
        env.step("1")
