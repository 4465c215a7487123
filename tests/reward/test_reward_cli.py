"""`roll-agentic reward check`: a reward module tried without starting a run."""

import textwrap

import pytest

import rewards
from roll_agentic.cli import main


@pytest.fixture
def user_reward(tmp_path, monkeypatch):
    monkeypatch.setattr(rewards, "__path__", [*rewards.__path__, str(tmp_path)])

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        monkeypatch.delitem(__import__("sys").modules, f"rewards.{name}", raising=False)
        return name

    return write


def test_a_shipped_reward_passes_with_its_handler(capsys):
    assert main(["reward", "check", "frozenlake"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS reward 'frozenlake': reward(summary) and handler(event, context) scored")


def test_a_handler_that_returns_no_reward_key_fails_local_or_not(user_reward, capsys):
    name = user_reward("scored", "def reward(summary):\n    return 1.0\n"
                                 "def handler(event, context):\n    return {'score': 1.0}\n")
    assert main(["reward", "check", name]) == 1
    assert "FAIL reward 'scored': " in capsys.readouterr().err
    # reward=local runs score through a module's handler too (LocalRewardClient): it fails there
    assert main(["reward", "check", name, "--local"]) == 1
    assert "FAIL reward 'scored': " in capsys.readouterr().err
    plain = user_reward("plain", "def reward(summary):\n    return 1.0\n")
    assert main(["reward", "check", plain, "--local"]) == 0
    assert "PASS reward 'plain': reward(summary) scored" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["frozenlak"], "did you mean frozenlake?"),
    (["my_reward.py"], "without .py: 'my_reward'"),
    (["frozenlake", "--env", "NoSuchEnv-v0"], "env_id 'NoSuchEnv-v0'"),
    (["frozenlake", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
])
def test_mistakes_are_one_line(argv, says, capsys):
    assert main(["reward", "check", *argv]) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err, err
