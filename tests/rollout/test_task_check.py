"""A run's tasks are checked before anything starts: one line naming the task, not a failing run."""

import sys
import textwrap
import threading

import gymnasium as gym
import pytest

import rewards
from roll_agentic.config import TaskConfig
from roll_agentic.rollout.task_check import task_problem


def test_shipped_tasks_pass():
    tasks = [TaskConfig(name="frozenlake", env_id="envs.frozenlake:FrozenLakeText", reward="frozenlake"),
             TaskConfig(name="cliff", env_id="CliffWalking-v1")]
    assert task_problem(tasks) == ""


def test_a_typo_in_env_id_names_the_task_and_the_module():
    problem = task_problem([TaskConfig(name="fl", env_id="envs.frozenlak:FrozenLakeText", reward="frozenlake")])
    assert problem.startswith("tasks[0] (fl): env_id 'envs.frozenlak:FrozenLakeText': cannot import module")


def test_an_env_that_fails_to_build_is_reported_as_such():
    problem = task_problem([TaskConfig(name="fl", env_id="envs.frozenlake:FrozenLakeText", env_kwargs={"sise": 3})])
    assert problem.startswith("tasks[0] (fl): env_id 'envs.frozenlake:FrozenLakeText'") and "sise" in problem


def test_a_reward_module_that_does_not_exist_is_named():
    problem = task_problem([TaskConfig(name="g", env_id="CliffWalking-v1"),
                            TaskConfig(name="h", env_id="CliffWalking-v1", reward="frozen_lake")])
    assert problem.startswith("tasks[1] (h): reward 'frozen_lake' is not a module in rewards/")


# -- an env that builds but cannot play, a reward that cannot score: every episode failed,
# and the run gave up only after five minutes of failures. Now one line before the start.


class ResetRaises(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the simulator is not installed")

    def step(self, action):
        return "x", 0.0, True, False, {}


class StepRaisesOnGarbage(ResetRaises):
    def reset(self, *, seed=None, options=None):
        return "Say a move.", {}

    def step(self, action):
        return "moved", 0.0, True, False, {"move": ["north", "south"].index(action)}


def test_an_env_whose_reset_raises_is_named_before_the_run():
    problem = task_problem([TaskConfig(name="sim", env_id=f"{__name__}:ResetRaises")])
    assert problem.startswith(f"tasks[0] (sim): env_id '{__name__}:ResetRaises': reset(seed=0) failed: "
                              "RuntimeError: the simulator is not installed")


def test_an_env_that_raises_on_an_unparseable_reply_is_named_before_the_run():
    problem = task_problem([TaskConfig(name="sim", env_id=f"{__name__}:StepRaisesOnGarbage")])
    assert problem.startswith(f"tasks[0] (sim): env_id '{__name__}:StepRaisesOnGarbage': "
                              "step(<a reply that names no action>) failed: ValueError")


HUNG = threading.Event()  # set at the end of the test below: its env threads then return


class ResetHangs(ResetRaises):
    """A simulator that never comes up: its reset waits (bounded, so no test waits for ever)."""

    def reset(self, *, seed=None, options=None):
        HUNG.wait(10)
        return "up at last", {}


class BuildHangs(ResetRaises):
    def __init__(self):
        HUNG.wait(10)
        super().__init__()


@pytest.mark.parametrize("env, call", [("ResetHangs", "reset(seed=0)"), ("BuildHangs", "building it")])
def test_an_env_call_that_does_not_return_is_named_not_waited_for(monkeypatch, env, call):
    """The check called the env on the main thread with no limit: a reset that hung held the
    start for ever, silently. Past the run's env call limit it is named, as the run would fail."""
    import roll_agentic.rollout.task_check as task_check

    monkeypatch.setattr(task_check, "ENV_CHECK_TIMEOUT_S", 0.2, raising=False)
    try:
        problem = task_problem([TaskConfig(name="sim", env_id=f"{__name__}:{env}")])
    finally:
        HUNG.set()
    HUNG.clear()
    assert problem.startswith(f"tasks[0] (sim): env_id '{__name__}:{env}': {call} did not return within 0.2s"), problem
    assert "rollout.env_step_timeout_s" in problem


@pytest.fixture
def user_rewards(tmp_path, monkeypatch):
    """Writes reward modules into a folder the `rewards` package also searches."""
    monkeypatch.setattr(rewards, "__path__", [*rewards.__path__, str(tmp_path)])

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(sys.modules, f"rewards.{name}", raising=False)
        return name

    return write


@pytest.mark.parametrize("source, message", [
    ("def reward(summary, scale):\n    return 1.0\n",
     "reward(summary, scale) cannot be called as reward(summary); give it exactly those parameters"),
    ("def reward(summary):\n    return 1.0\ndef handler(event):\n    return reward(event)\n",
     "handler(event) cannot be called as handler(event, context)"),
    ("def reward(summary):\n    return summary['code']\n",
     "reward(summary) raised KeyError: 'code' on a one-turn episode's summary (keys: task, seed, env_return"),
    ("def reward(summary):\n    return float('nan')\n",
     "reward(summary) must return a finite number (or {'reward': number}); the reward is not finite: nan"),
    ("def reward(summary):\n    return None\n", "must return a finite number (or {'reward': number}); the reward is not a number: None"),
    ("def reward(summary):\n    return '0.5'\n", "the reward is not a number: '0.5'"),
    ("def reward(summary):\n    return {'score': 1.0}\n", "returned a dict without a 'reward' key: ['score']"),
    ("def score(summary):\n    return 1.0\n", "has no function reward(summary)"),
    ("import a_package_nobody_installed\ndef reward(summary):\n    return 1.0\n",
     "raised ModuleNotFoundError: No module named 'a_package_nobody_installed'"),
])
def test_a_reward_that_cannot_score_is_named_before_the_run(user_rewards, source, message):
    name = user_rewards("mine", source)
    problem = task_problem([TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)])
    assert problem.startswith("tasks[0] (cliff): reward 'mine': ") and message in problem, problem


def test_a_slow_reward_does_not_hold_the_start(user_rewards, monkeypatch):
    """A first call may load a model: past the check's wait the start goes on (the run's
    reward timeouts handle a reward that never returns), and nothing waits out the sleep."""
    import time

    import roll_agentic.rollout.task_check as task_check

    monkeypatch.setattr(task_check, "REWARD_CHECK_TIMEOUT_S", 0.5)
    name = user_rewards("sleepy", "import time\ndef reward(summary):\n    time.sleep(60)\n")
    t0 = time.monotonic()
    assert task_problem([TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]) == ""
    assert time.monotonic() - t0 < 30


def test_a_dict_result_and_every_shipped_task_pass(user_rewards):
    name = user_rewards("as_dict", "def reward(summary):\n    return {'reward': 1.0, 'detail': 'x'}\n")
    assert task_problem([TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]) == ""
    shipped = [("envs.frozenlake:FrozenLakeText", "frozenlake"), ("envs.guess_number:GuessNumber", "guess_number"),
               ("envs.tail_turns:TailTurnsEnv", "env_return"), ("envs.single_turn:SingleTurnPrompt", "code_exec")]
    assert task_problem([TaskConfig(name=f"t{i}", env_id=e, reward=r) for i, (e, r) in enumerate(shipped)]) == ""


def test_serverless_mode_needs_the_handler_local_mode_does_not(user_rewards):
    name = user_rewards("no_handler", "def reward(summary):\n    return 1.0\n")
    tasks = [TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]
    assert task_problem(tasks, "local") == ""
    problem = task_problem(tasks, "serverless")
    assert problem.startswith("tasks[0] (cliff): reward 'no_handler': ") and "handler(event, context)" in problem
    assert "reward=local" in problem


@pytest.mark.parametrize("handler, message", [
    ("def handler(event, context):\n    return {'score': reward(event)}\n",
     "handler(event, context) must return {'reward': number}, as `return {'reward': reward(event)}` does; "
     "the reward function returned a dict without a 'reward' key: ['score']"),
    ("def handler(event, context):\n    return event['body']\n",
     "handler(event, context) raised KeyError: 'body' on a one-turn episode's summary as the event"),
])
def test_both_modes_call_the_handler_once_too(user_rewards, handler, message):
    """Before, a handler that returned {'score': ...} passed the start and failed every
    trajectory of the run (reward_failed), about a minute later. reward=local runs score
    through the handler too (LocalRewardClient), yet the local check tried reward() only."""
    name = user_rewards("bad_handler", "def reward(summary):\n    return 1.0\n" + handler)
    tasks = [TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]
    for mode in ("local", "serverless"):
        problem = task_problem(tasks, mode)
        assert problem.startswith("tasks[0] (cliff): reward 'bad_handler': ") and message in problem, problem
    assert "reward=local runs call it too" in task_problem(tasks, "local")


def test_local_mode_calls_what_the_local_client_calls(user_rewards):
    """With a handler, LocalRewardClient never calls reward() itself: a reward() that only
    the handler's wrapper can call (here, one that needs its argument unpacked) passes."""
    name = user_rewards("via_handler", """
        def reward(summary):
            return summary["inner"]["value"]

        def handler(event, context):
            return {"reward": reward({"inner": {"value": 0.5}})}
    """)
    tasks = [TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]
    assert task_problem(tasks, "local") == ""
    assert "reward(summary) raised KeyError: 'inner'" in task_problem(tasks, "serverless")


def test_a_handler_that_reads_its_context_passes_in_both_modes(user_rewards):
    """Called with context None, a handler budgeting its time as AWS's do (and as the
    emulator and LocalRewardClient allow) failed the start with an AttributeError."""
    name = user_rewards("budgeted", """
        def reward(summary):
            return 1.0

        def handler(event, context):
            left_s = context.get_remaining_time_in_millis() / 1000.0
            assert 0 < left_s <= 30 and context.function_name == "budgeted", (left_s, context.function_name)
            return {"reward": reward(event)}
    """)
    tasks = [TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]
    assert task_problem(tasks, "serverless") == ""
    assert task_problem(tasks, "local") == ""


def test_every_shipped_reward_handler_passes_in_serverless_mode():
    shipped = [("envs.frozenlake:FrozenLakeText", "frozenlake"), ("envs.guess_number:GuessNumber", "guess_number"),
               ("envs.tail_turns:TailTurnsEnv", "env_return"), ("envs.single_turn:SingleTurnPrompt", "code_exec")]
    tasks = [TaskConfig(name=f"t{i}", env_id=e, reward=r) for i, (e, r) in enumerate(shipped)]
    assert task_problem(tasks, "serverless") == ""


# -- envs the start check took badly: a bare error, a traceback, a seed ignored in silence


class RaisesValueError(ResetRaises):
    def __init__(self, size: int = 0):
        raise ValueError(f"size must be positive, got {size}")


def test_a_constructor_that_raises_value_error_is_named_with_the_env():
    """A ValueError of the user's was taken for the registry's own message and shown bare."""
    problem = task_problem([TaskConfig(name="sim", env_id=f"{__name__}:RaisesValueError")])
    assert problem == (f"tasks[0] (sim): constructing '{__name__}:RaisesValueError' raised ValueError: "
                       "size must be positive, got 0")


class NoClose:
    """A text env that is no gym.Env: it has no close, which the run does not need."""

    def __init__(self):
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return f"seed {seed}", {}

    def step(self, action):
        return "done", 0.0, True, False, {"invalid_action": True}


def test_an_env_without_close_passes():
    assert task_problem([TaskConfig(name="sim", env_id=f"{__name__}:NoClose")]) == ""


class IgnoresSeed(NoClose):
    resets = 0

    def reset(self, *, seed=None, options=None):
        IgnoresSeed.resets += 1
        return f"target {IgnoresSeed.resets}", {}


@pytest.fixture
def fresh_warnings(monkeypatch):
    import roll_agentic.rollout.task_check as task_check

    monkeypatch.setattr(task_check, "_WARNED_NONDETERMINISTIC", set())


def test_an_env_that_ignores_its_seed_is_warned_about_once(fresh_warnings, capsys):
    """GRPO groups and evaluation take one seed for one episode; no task key lets an env say it
    varies on purpose (envs/tail_turns.py does), so a warning, once, not a refusal."""
    tasks = [TaskConfig(name="sim", env_id=f"{__name__}:IgnoresSeed"),
             TaskConfig(name="sim2", env_id=f"{__name__}:IgnoresSeed")]
    assert task_problem(tasks) == "" and task_problem(tasks) == ""
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and err.count("\n") == 1, err
    assert (f"warning: task 'sim': env_id '{__name__}:IgnoresSeed': reset(seed=0) twice gave different "
            "observations") in err
    assert "reset(seed=...) must be deterministic" in err and "self.np_random" in err


def test_a_seeded_env_is_not_warned_about(fresh_warnings, capsys):
    tasks = [TaskConfig(name="sim", env_id=f"{__name__}:NoClose"), TaskConfig(name="cliff", env_id="CliffWalking-v1")]
    assert task_problem(tasks) == ""
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("line", ["from rewards.helper_mod import bonus", "from .helper_mod import bonus",
                                  "from helper_mod import bonus"])
def test_serverless_mode_refuses_a_reward_importing_its_own_package(user_rewards, line):
    """Deployed as one file, it imported fine here and every invoke failed on AWS with
    Runtime.ImportModuleError; the deploy refuses it, and the check says so first."""
    user_rewards("helper_mod", "def bonus():\n    return 1.0\n")
    name = user_rewards("uses_helper", f"{line}\ndef reward(summary):\n    return bonus()\n"
                                       "def handler(event, context):\n    return {'reward': reward(event)}\n")
    tasks = [TaskConfig(name="cliff", env_id="CliffWalking-v1", reward=name)]
    if line.startswith("from rewards."):  # importable here: reward=local runs it in process
        assert task_problem(tasks, "local") == ""
    problem = task_problem(tasks, "serverless")
    assert problem.startswith("tasks[0] (cliff): reward 'uses_helper': uses_helper.py line 1: "), problem
    assert "Runtime.ImportModuleError" in problem and "--handler uses_helper.handler" in problem
