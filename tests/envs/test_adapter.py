import gymnasium as gym
import numpy as np
import pytest

from envs.adapter import DiscreteTextAdapter
from envs.checker import check_env
from envs.registry import EnvSpecError, make_text_env
from roll_agentic.rollout.env_contract import EnvContractError, check_step


def test_frozenlake_v1_through_the_generic_adapter():
    env = make_text_env("FrozenLake-v1", {"is_slippery": False})
    assert isinstance(env, DiscreteTextAdapter)
    obs, _ = env.reset(seed=0)
    assert "[S]FFF" in obs and "left, down, right, up" in obs
    obs, reward, terminated, truncated, info = env.step("I go right.")
    assert "S[F]FF" in obs and reward == 0.0 and not terminated


def test_cliffwalking_by_name_and_index():
    env = make_text_env("CliffWalking-v1")
    env.reset(seed=0)
    assert env.parse_action("UP please") == 0
    assert env.parse_action("action 1") == 1
    _, reward, *_ = env.step("up")
    assert reward == -1.0


def test_unparseable_reply_is_an_invalid_action_not_a_crash():
    env = make_text_env("CliffWalking-v1")
    obs0, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\ufffd\x00 gibberish 99")
    assert info["invalid_action"] and obs == obs0 and reward == 0.0 and not terminated


def test_non_text_observation_is_dumped_readably():
    env = make_text_env("CartPole-v1")
    obs, _ = env.reset(seed=0)
    assert obs.startswith("[") and "Answer with one of: 0, 1." in obs


@pytest.mark.parametrize("env_id", ["CliffWalking-v1", "FrozenLake-v1", "Blackjack-v1",
                                    "envs.frozenlake:FrozenLakeText", "envs.guess_number:GuessNumber"])
def test_checker_passes_good_envs(env_id):
    results = check_env(env_id)
    assert all(r.ok for r in results), [r for r in results if not r.ok]


def test_checker_explains_bad_ids():
    [r] = check_env("Taxi-v1")
    assert not r.ok and "Did you mean" in r.detail
    [r] = check_env("no_such_module:Env")
    assert not r.ok and "cannot import module" in r.detail
    with pytest.raises(EnvSpecError, match="needs text actions or a Discrete"):
        make_text_env("MountainCarContinuous-v0")


class _WrongTypes:
    """An env that returns an int observation: the checker must say so."""

    def __init__(self):
        import gymnasium as gym

        self.observation_space = gym.spaces.Text(10)
        self.action_space = gym.spaces.Text(10)

    def reset(self, *, seed=None, options=None):
        return 42, {}

    def step(self, action):
        return 42, 0.0, False, False, {}

    def close(self):
        pass


def test_checker_names_wrong_types():
    results = check_env("tests.envs.test_adapter:_WrongTypes")
    bad = [r for r in results if not r.ok]
    assert bad and bad[0].detail == "reset: observation must be str, got int 42"  # the contract training uses


class _NumpyStep(_WrongTypes):
    """Text in and out, with numpy's reward and flags (as many gymnasium envs return); NaN on request."""

    def reset(self, *, seed=None, options=None):
        return "start", {"invalid_action": False}

    def step(self, action):
        import numpy as np

        if "\x00" in action:
            return "start", np.float32(0.0), np.bool_(False), np.bool_(False), {"invalid_action": True}
        reward = np.float32("nan") if getattr(self, "nan", False) else np.float32(1.0)
        return "next", reward, np.bool_(True), np.bool_(False), {}


class _NanStep(_NumpyStep):
    nan = True


def test_checker_holds_envs_to_the_contract_training_uses():
    """numpy rewards and flags train fine, so they pass; a NaN reward fails every episode, so it fails."""
    ok = {r.name: r for r in check_env("tests.envs.test_adapter:_NumpyStep")}
    assert ok["step types"].ok, ok["step types"].detail
    nan = {r.name: r for r in check_env("tests.envs.test_adapter:_NanStep")}
    assert not nan["step types"].ok and "reward must be a finite number" in nan["step types"].detail


class _Shifted(gym.Env):
    """Discrete(3, start=-1): actions -1, 0 and 1."""

    def __init__(self):
        self.observation_space = gym.spaces.Discrete(1)
        self.action_space = gym.spaces.Discrete(3, start=-1)
        self.taken = []

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        assert self.action_space.contains(action), action
        self.taken.append(int(action))
        return 0, 0.0, False, False, {}

    def close(self):
        pass


def test_a_discrete_space_with_a_start_maps_replies_onto_its_actions():
    env = DiscreteTextAdapter(_Shifted())
    env.reset(seed=0)
    for reply in ("0", "1", "2"):  # indices into the space's three actions
        env.step(reply)
    assert env.env.taken == [-1, 0, 1]


class _Flags(gym.Env):
    """A Discrete env whose step returns the given terminated flag."""

    def __init__(self, terminated=False):
        self.observation_space = gym.spaces.Discrete(1)
        self.action_space = gym.spaces.Discrete(2)
        self.terminated = terminated

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, self.terminated, False, {}


class _StringFlag(_Flags):
    def __init__(self):
        super().__init__("False")


@pytest.mark.parametrize("flag", ["False", None, 1.0, np.array([True, False])])
def test_the_adapter_refuses_flags_the_contract_refuses(flag):
    """bool("False") is True and bool(None) False: the adapter's bool() hid them from the
    contract, so an episode ended (or never did) on a flag the env did not mean."""
    env = DiscreteTextAdapter(_Flags(flag))
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"^_Flags\.step: terminated must be a bool, got "):
        env.step("1")
    with pytest.raises(EnvContractError):
        check_step(("x", 0.0, flag, False, {}))  # the same rule


@pytest.mark.parametrize("flag, expect", [(np.bool_(True), True), (np.bool_(False), False), (True, True), (0, False)])
def test_the_adapter_and_the_contract_accept_numpy_bools(flag, expect):
    env = DiscreteTextAdapter(_Flags(flag))
    env.reset(seed=0)
    _, _, terminated, _, _ = check_step(env.step("1"))
    assert terminated is expect
    check_step(("x", 0.0, flag, flag, {}))


def test_env_check_fails_a_discrete_env_whose_flag_is_a_string():
    results = {r.name: r for r in check_env("tests.envs.test_adapter:_StringFlag")}
    assert not results["step types"].ok
    assert "_StringFlag.step: terminated must be a bool, got str 'False'" in results["step types"].detail


class _NoClose:
    """A Discrete env that is no gym.Env, so it has no close."""

    observation_space = gym.spaces.Discrete(1)
    action_space = gym.spaces.Discrete(2)
    spec = None

    @property
    def unwrapped(self):
        return self

    def reset(self, *, seed=None, options=None):
        return 0, {}


def test_closing_an_adapted_env_without_close_is_a_no_op():
    DiscreteTextAdapter(_NoClose()).close()
