"""A user's run file that Hydra cannot load says why in one line: a .yml name, and a file named
config.yaml whose defaults list names the built-in `config` (it named itself: endless recursion)."""

import textwrap

import pytest

from roll_agentic.cli import main
from roll_agentic.config import ConfigError
from roll_agentic.hydra_config import load_config

FROM_DEFAULT = """
defaults:
  - config
  - _self_
trainer:
  total_steps: 3
"""
SHADOW = "rename your file (e.g. to my_run.yaml): a file named config.yaml shadows the built-in conf/config.yaml"


def _write(folder, name, text=FROM_DEFAULT):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_yml_file_is_refused_with_the_name_to_give_it(tmp_path):
    _write(tmp_path, "my_run.yml")
    with pytest.raises(ConfigError) as err:
        load_config([], tmp_path, "my_run.yml")
    assert str(err.value) == ("config files must end in .yaml (Hydra loads no other): rename "
                              f"{tmp_path / 'my_run.yml'} to my_run.yaml")
    assert "yml.yaml" not in str(err.value)


def test_a_missing_yml_file_says_yaml_too(tmp_path):
    with pytest.raises(ConfigError, match=r"must end in \.yaml.*no nope\.yaml in"):
        load_config([], tmp_path, "nope.yml")


def test_the_renamed_file_loads(tmp_path):
    _write(tmp_path, "my_run.yaml")
    assert load_config([], tmp_path, "my_run.yaml").trainer.total_steps == 3


@pytest.mark.parametrize("entry", ["config", "/config"])
def test_a_config_yaml_naming_config_is_refused_not_recursed(tmp_path, entry):
    _write(tmp_path, "config.yaml", FROM_DEFAULT.replace("- config", f"- {entry}"))
    with pytest.raises(ConfigError) as err:
        load_config([], tmp_path, "config.yaml")
    assert SHADOW in str(err.value) and "recursion" not in str(err.value)


def test_another_file_reaching_that_config_yaml_is_refused_too(tmp_path):
    _write(tmp_path, "config.yaml")
    _write(tmp_path, "my_run.yaml")  # its `config` is the folder's config.yaml, which names itself
    with pytest.raises(ConfigError, match="shadows the built-in"):
        load_config([], tmp_path, "my_run.yaml")


def test_the_built_in_config_still_loads():
    assert load_config([]).trainer.total_steps > 0


@pytest.mark.parametrize("name, says", [("config.yaml", "shadows the built-in"), ("my_run.yml", "must end in .yaml")])
def test_the_cli_says_it_in_one_line(tmp_path, capsys, name, says):
    path = _write(tmp_path, name)
    assert main(["train", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
