"""`roll-agentic env new`: the package it writes passes the env check and the run's start check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envs.checker import check_env
from envs.scaffold import ENV_CLASS, ScaffoldError, next_steps, scaffold
from roll_agentic.config import TaskConfig
from roll_agentic.rollout.task_check import task_problem


@pytest.fixture
def importable(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_package_checks_and_scores(importable):
    files = scaffold("my_first_task", importable)
    assert sorted(f.name for f in files) == ["__init__.py", "env.py", "my_first_task_reward.py"]
    results = check_env(f"my_first_task.env:{ENV_CLASS}", {"size": 3})
    assert all(r.ok for r in results), [(r.name, r.detail) for r in results]
    task = TaskConfig(name="t", env_id=f"my_first_task.env:{ENV_CLASS}", reward="my_first_task.my_first_task_reward",
                      max_turns=6, format_penalty=0.2)
    assert task_problem([task], reward_mode="serverless") == ""


def test_the_env_plays_its_task_and_the_reward_credits_it(importable):
    scaffold("reach_task", importable)
    from reach_task.env import Env
    from reach_task.reach_task_reward import handler, reward

    env = Env(size=4)
    obs, info = env.reset(seed=3)
    target = int(obs.split("Reach ")[1].split()[0])
    assert info == {"success": False, "moves": 0, "distance": target}
    obs, r, term, trunc, info = env.step("hmm")
    assert (r, term, info["invalid_action"]) == (0.0, False, True) and obs.startswith("Reply up or down.")
    for _ in range(target):
        obs, r, term, trunc, info = env.step("Up!")
    assert (r, term, info["success"]) == (1.0, True, True)
    won = {"success": True, "num_turns": target + 1, "num_invalid": 1, "format_penalty": 0.2, "info": info}
    lost = {"success": False, "num_turns": 6, "num_invalid": 0, "format_penalty": 0.2,
            "info": {"distance": 2}}
    assert reward(won) == pytest.approx(1.0 - 0.2 / (target + 1))
    assert reward(lost) == pytest.approx(0.5 / 3)
    assert handler(lost, None) == {"reward": reward(lost)}


@pytest.mark.parametrize("name, says", [
    ("9lives", "cannot be a Python package name"),
    ("my-task", "cannot be a Python package name"),
    ("class", "'class' is a Python keyword"),
    ("json", "'json' is a module of Python's standard library.*choose another name"),
    ("envs", "'envs' is one of roll-agentic's own packages.*choose another name"),
    ("pytest", "already an importable module here"),
])
def test_a_name_that_cannot_be_a_package_is_refused(tmp_path, name, says):
    with pytest.raises(ScaffoldError, match=says):
        scaffold(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["envs", "rewards", "serverless", "roll_agentic"])
def test_a_shipped_package_is_never_offered_for_removal(tmp_path, name):
    """In a clone's root `env new envs` said "not overwriting envs/__init__.py: remove them"."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("shipped")
    with pytest.raises(ScaffoldError) as err:
        scaffold(name, tmp_path)
    assert "choose another name" in str(err.value) and "remove" not in str(err.value)
    assert "not overwriting" not in str(err.value)
    assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["__init__.py"]


def test_two_scaffolded_tasks_train_together(importable):
    """Both wrote reward.py: the run refused them as one Lambda function (roll-agentic-reward)."""
    from roll_agentic.hydra_config import load_config

    rewards = {}
    for name in ("task_one", "task_two"):
        reward_file = next(f for f in scaffold(name, importable) if f.name not in ("__init__.py", "env.py"))
        rewards[name] = f"{name}.{reward_file.stem}"
    assert rewards == {"task_one": "task_one.task_one_reward", "task_two": "task_two.task_two_reward"}
    tasks = ",".join(f"{{name:{n},env_id:{n}.env:{ENV_CLASS},reward:{r}}}" for n, r in rewards.items())
    cfg = load_config([f"tasks=[{tasks}]", "reward=serverless"])
    assert task_problem(cfg.tasks, reward_mode="serverless") == ""


def test_nothing_is_overwritten(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "env.py").write_text("my work")
    with pytest.raises(ScaffoldError, match="not overwriting .*mine/env.py"):
        scaffold("mine", tmp_path)
    assert (tmp_path / "mine" / "env.py").read_text() == "my work"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["env.py"]


def test_the_command_prints_the_commands_that_check_and_train_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "roll_agentic.cli", "env", "new", "cmd_task", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for line in next_steps("cmd_task"):
        assert line in out.stdout
    check = subprocess.run([sys.executable, "-m", "roll_agentic.cli", "env", "check", f"cmd_task.env:{ENV_CLASS}"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert check.returncode == 0 and "5 passed, 0 failed" in check.stdout, check.stdout + check.stderr
    again = subprocess.run([sys.executable, "-m", "roll_agentic.cli", "env", "new", "cmd_task", "--dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "not overwriting" in again.stderr


def test_a_module_given_without_its_class_is_named_with_the_class_to_add(importable):
    scaffold("hint_task", importable)
    detail = check_env("hint_task.env")[0].detail
    assert "It is a module: name its class, e.g. hint_task.env:Env" in detail
