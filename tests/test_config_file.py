"""A run's config kept in a yaml of the user's own (`roll-agentic train --config FILE`)."""

import subprocess
import sys
import textwrap

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.hydra_config import load_config

MY_RUN = """
defaults:
  - config
  - override engine: hf
  - override reward: local
  - _self_
trainer:
  total_steps: 3
tasks:
  - {name: cliff, env_id: CliffWalking-v1, max_turns: 5, format_penalty: 2}
"""


def _write(folder, name, text):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_users_file_starts_from_the_default_run_and_the_command_line_wins(tmp_path):
    _write(tmp_path, "my_run.yaml", MY_RUN)
    cfg = load_config(["trainer.total_steps=4"], tmp_path, "my_run.yaml")
    assert cfg.trainer.total_steps == 4  # the command line over the file
    assert (cfg.engine.backend, cfg.reward.mode) == ("hf", "local")  # groups chosen in the file
    assert [t.name for t in cfg.tasks] == ["cliff"]
    assert cfg.output_dir == load_config([]).output_dir  # the rest from the default run


@pytest.mark.parametrize("text, says", [
    ("trainer:\n  total_steps: 3\n", "must start from the schema: put `defaults: [config, _self_]` at its top"),
    ("defaults:\n  - config\n  - _self_\nengine: hf\n",
     "'engine: hf' sets the whole engine section to a string: engine is a config group, so choose its option "
     "in the yaml's defaults list (`- override engine: hf`, after `- config`) or on the command line (engine=hf)"),
    ("defaults:\n  - config\n  - _self_\ntrainer:\n  total_stepz: 3\n", "unknown config key 'trainer.total_stepz'"),
    # YAML mistakes: Hydra's first line named neither the file nor the line
    ("defaults:\n  - config\n  - _self_\ntrainer:\n  total_steps: 3\n   lr: 0.1\n",
     "run.yaml, line 6, column 6: mapping values are not allowed here (a key indented differently"),
    ("defaults:\n  - config\n  - _self_\ntrainer:\n  total_steps: 3\ntrainer:\n  lr: 0.1\n",
     "run.yaml, line 6, column 1: 'trainer' is given twice (first on line 4); keep one"),
    ("defaults:\n  - config\n  - _self_\ntrainer: {total_steps: 3\n", "run.yaml, line 5, column 1: while parsing a flow"),
    # valid Hydra that threw the file's own values away, silently
    ("defaults:\n  - _self_\n  - config\ntrainer: {total_steps: 1}\n",
     "its defaults list puts _self_ before config, so config's values are merged over this file's"),
])
def test_a_file_that_cannot_be_a_run_says_what_to_write(tmp_path, text, says):
    _write(tmp_path, "run.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config([], tmp_path, "run")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_command_takes_the_file_and_refuses_mixed_flags(tmp_path):
    path = _write(tmp_path, "my_run.yaml", MY_RUN.replace("total_steps: 3", "total_steps: 0"))
    cmd = [sys.executable, "-m", "roll_agentic.cli", "train"]
    out = subprocess.run([*cmd, "--config", str(path)], capture_output=True, text=True, timeout=120)
    # the file was read: its own bad value is what ends the run, before any work
    assert out.returncode == 2 and "config error: trainer.total_steps" in out.stderr, out.stderr
    out = subprocess.run([*cmd, "-c", str(path), "--config-name", "other"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "not both" in out.stderr
    out = subprocess.run([*cmd, "-c", str(tmp_path / "missing.yaml")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no missing.yaml in" in out.stderr
