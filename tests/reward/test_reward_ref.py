"""A task's reward may be a module of the user's own package, not only one in rewards/."""

from __future__ import annotations

import asyncio
import sys
import textwrap

import pytest

from roll_agentic.config import Config, ConfigError, RewardConfig, TaskConfig
from roll_agentic.config_check import validate
from roll_agentic.reward import LocalRewardClient, LocalServerless, ServerlessRewardClient
from roll_agentic.reward.reward_ref import (
    function_stem,
    module_name,
    source_file,
    stem_clashes,
    syntax_problem,
)
from roll_agentic.rollout.task_check import task_problem

SCORING = """
def reward(summary):
    return 0.25 + 0.5 * bool(summary.get("success"))

def handler(event, context):
    return {"reward": reward(event)}
"""


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    """A package `my_pkg` of the user's, importable as a run from its folder has it."""
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "scoring.py").write_text(textwrap.dedent(SCORING))
    (pkg / "broken.py").write_text("def reward(summary):\n    return summary['answer']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    yield pkg
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        del sys.modules[name]  # imported from this test's folder: no later test may find it


def test_names_map_to_modules_files_and_functions():
    assert module_name("frozenlake") == "rewards.frozenlake"
    assert module_name("my_pkg.scoring") == "my_pkg.scoring"
    assert function_stem("frozenlake") == "frozenlake"
    assert function_stem("my_pkg.sub.scoring") == "scoring"
    assert source_file("frozenlake").name == "frozenlake.py"
    assert stem_clashes(["frozenlake", "a.frozenlake", "frozenlake", "b.x"]) == [("frozenlake", "a.frozenlake")]


@pytest.mark.parametrize("ref, says", [
    ("", "a module name"),
    ("my-reward", "Python identifiers joined by dots"),
    ("my_pkg..x", "Python identifiers joined by dots"),
    ("rewards/frozenlake.py", "without .py: 'frozenlake'"),
    ("my_pkg/my_reward.py", "without .py: 'my_pkg.my_reward'"),
    ("my_reward.py", "without .py: 'my_reward'"),
    ("rewards.frozenlake", "'frozenlake' alone for a module in rewards/"),
    ("rewards.frozenlak", "'frozenlake' alone for a module in rewards/ (there is no 'frozenlak')"),
])
def test_a_name_that_cannot_be_a_module_is_refused_with_what_to_write(ref, says):
    assert says in syntax_problem(ref)
    cfg = Config(tasks=[TaskConfig(name="t", env_id="CliffWalking-v1", reward=ref, format_penalty=2)])
    with pytest.raises(ConfigError, match=r"tasks\.0\.reward: expected ") as err:
        validate(cfg)
    assert str(err.value).count(repr(ref)) == 1  # the value once, as `got ...`


def test_two_rewards_that_would_share_one_function_are_refused():
    cfg = Config(reward=RewardConfig(mode="serverless"), tasks=[
        TaskConfig(name="a", env_id="CliffWalking-v1", reward="frozenlake"),
        TaskConfig(name="b", env_id="CliffWalking-v1", reward="my_pkg.frozenlake"),
    ])
    with pytest.raises(ConfigError, match="'frozenlake' and 'my_pkg.frozenlake' would both be deployed as "
                                          "roll-agentic-frozenlake; rename one module's file"):
        validate(cfg)
    cfg.tasks[1].reward = "frozenlake"  # one module for two tasks is one function: fine
    validate(cfg)


def test_a_user_module_passes_the_start_check_and_its_faults_are_named(user_pkg):
    task = TaskConfig(name="cliff", env_id="CliffWalking-v1", reward="my_pkg.scoring")
    assert task_problem([task], reward_mode="serverless") == ""
    task.reward = "my_pkg.missing"
    problem = task_problem([task])
    # the package is there: only the module is missing, said so (and the closest one named)
    assert problem.startswith("tasks[0] (cliff): reward 'my_pkg.missing': package my_pkg has no module "
                              "missing"), problem
    task.reward = "my_pkg.scoreing"
    assert "package my_pkg has no module scoreing (did you mean scoring?)" in task_problem([task])
    task.reward = "frozenlak"  # a shipped reward, misspelt
    assert "reward 'frozenlak' is not a module in rewards/ (did you mean frozenlake?)" in task_problem([task])
    task.reward = "not_a_pkg_here.scoring"
    assert "no module not_a_pkg_here.scoring is importable" in task_problem([task])
    task.reward = "my_pkg.broken"
    problem = task_problem([task])
    assert "my_pkg/broken.py's reward(summary) raised KeyError" in problem, problem
    (user_pkg / "sub").mkdir()  # a package, not one file: it cannot be deployed as one module
    (user_pkg / "sub" / "__init__.py").write_text("def reward(summary):\n    return 1.0\n")
    task.reward = "my_pkg.sub"
    assert "is not a plain module file; a reward is deployed as one .py file" in task_problem([task])
    task.reward = "my_pkg"  # bare: a module in rewards/, which has none of that name
    assert task_problem([task]).startswith("tasks[0] (cliff): reward 'my_pkg' is not a module in rewards/")


def test_the_local_client_scores_a_user_module(user_pkg):
    async def main():
        client = LocalRewardClient(timeout_s=5)
        try:
            good = await client.score("my_pkg.scoring", {"success": True})
            bad = await client.score("my_pkg.broken", {"success": True})
        finally:
            await client.close()
        return good, bad

    good, bad = asyncio.run(main())
    assert good.ok and good.value == 0.75
    assert not bad.ok and bad.error.startswith("my_pkg.broken: KeyError")


@pytest.mark.slow
def test_a_user_module_is_deployed_to_the_emulator_and_scored_there(user_pkg, tmp_path):
    cfg = RewardConfig(mode="serverless", timeout_s=5)
    with LocalServerless() as svc:
        url = svc.start(tmp_path / "state")
        deployed = svc.deploy_rewards(url, ["my_pkg.scoring", "frozenlake"], cfg)
        assert [d["FunctionName"] for d in deployed] == ["roll-agentic-scoring", "roll-agentic-frozenlake"]
        assert deployed[0]["Handler"] == "scoring.handler"

        async def main():
            client = ServerlessRewardClient(url, timeout_s=5)
            try:
                return await client.score("my_pkg.scoring", {"success": False})
            finally:
                await client.close()

        outcome = asyncio.run(main())
        assert outcome.ok and outcome.value == 0.25, outcome
        with pytest.raises(FileNotFoundError, match="package my_pkg has no module nothing"):
            svc.deploy_rewards(url, ["frozenlake", "my_pkg.nothing"], cfg)


def test_a_top_level_module_is_told_to_go_in_a_package(tmp_path, monkeypatch):
    """A bare name is a module in rewards/: "not a module in rewards/ (expected rewards/myrew.py)"
    sent the author of a top-level myrew.py to edit the installed package."""
    (tmp_path / "myrew_top_level.py").write_text("def reward(summary):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        source_file("myrew_top_level")
    assert str(err.value) == (
        "reward 'myrew_top_level': a bare name is a module in rewards/, and there is none of that name; "
        f"{tmp_path / 'myrew_top_level.py'} is a top-level module, which a reward cannot be: put it in a package "
        "of yours (my_pkg/myrew_top_level.py, with an empty my_pkg/__init__.py) and name it "
        "reward: my_pkg.myrew_top_level")
    problem = task_problem([TaskConfig(name="cliff", env_id="CliffWalking-v1", reward="myrew_top_level")])
    assert problem == f"tasks[0] (cliff): {err.value}"  # no "(expected rewards/myrew_top_level.py ...)" after it
    # a standard library module of that name is no file of the user's: the usual message
    with pytest.raises(FileNotFoundError, match="reward 'textwrap' is not a module in rewards/"):
        source_file("textwrap")
