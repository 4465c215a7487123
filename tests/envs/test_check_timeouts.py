"""`env check` bounds each env call as a run does: a reset or step that never returns
is a failed check, not a command that hangs with nothing printed."""

import inspect
import threading

import pytest
from gymnasium import spaces

from envs.checker import CheckResult, check_env, print_result
from roll_agentic.rollout.task_check import ENV_CHECK_TIMEOUT_S

HERE = __name__
# Set when a test ends: the daemon thread stuck in a "hung" call then returns, not
# lingering (nor holding a core) for the rest of the session.
_RELEASE = threading.Event()
_LIMIT_S = 1.0


@pytest.fixture(autouse=True)
def _release_hung_calls():
    _RELEASE.clear()
    yield
    _RELEASE.set()


class _TextEnv:
    def __init__(self):
        self.observation_space = self.action_space = spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return "start", {}

    def step(self, action):
        return "end", 0.0, True, False, {"invalid_action": True}


class HangsInReset(_TextEnv):
    def reset(self, *, seed=None, options=None):
        _RELEASE.wait(120)
        return "start", {}


class HangsInStep(_TextEnv):
    def step(self, action):
        _RELEASE.wait(120)
        return "end", 0.0, True, False, {}


class HangsInConstructor(_TextEnv):
    def __init__(self):
        _RELEASE.wait(120)
        super().__init__()


def test_a_reset_that_never_returns_fails_its_check_and_ends_the_check():
    seen: list[CheckResult] = []
    results = check_env(f"{HERE}:HangsInReset", timeout_s=_LIMIT_S, on_result=seen.append)
    assert [(r.name, r.ok) for r in results] == [("build", True), ("reset types", False)]
    assert "reset(seed=0) did not return within 1s" in results[1].detail
    assert "rollout.env_step_timeout_s" in results[1].detail
    assert seen == results  # each result handed on as it is made


def test_a_step_that_never_returns_fails_its_check():
    results = {r.name: r for r in check_env(f"{HERE}:HangsInStep", timeout_s=_LIMIT_S)}
    assert results["reset types"].ok
    assert not results["step types"].ok
    assert "did not return within 1s" in results["step types"].detail
    assert "unparseable reply" not in results  # the env is not called again after a hung call


def test_a_constructor_that_never_returns_fails_the_build():
    [result] = check_env(f"{HERE}:HangsInConstructor", timeout_s=_LIMIT_S)
    assert not result.ok and result.name == "build"
    assert f"building '{HERE}:HangsInConstructor' did not return within 1s" in result.detail


def test_the_default_limit_is_the_runs_and_envs_that_return_pass():
    default = inspect.signature(check_env).parameters["timeout_s"].default
    assert default == ENV_CHECK_TIMEOUT_S == 60.0
    assert all(r.ok for r in check_env(f"{HERE}:_TextEnv"))


def test_print_result_prints_one_line_per_check(capsys):
    print_result(CheckResult("reset types", False, "reset(seed=0) did not return within 60s"))
    assert capsys.readouterr().out == "FAIL  reset types        reset(seed=0) did not return within 60s\n"
