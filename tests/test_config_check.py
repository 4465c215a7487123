"""`validate` lives in roll_agentic/config_check.py, the schema in config.py."""

import subprocess
import sys

import pytest

from roll_agentic import config_check
from roll_agentic.config import AlgoConfig, Config, ConfigError, TaskConfig


def test_either_module_imports_first_in_a_fresh_interpreter():
    # config_check imports the schema; the schema must not need config_check back.
    for first, second in (("roll_agentic.config_check", "roll_agentic.config"),
                          ("roll_agentic.config", "roll_agentic.config_check")):
        code = f"import {first}, {second}\nfrom roll_agentic.config_check import validate\n"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_validate_passes_the_defaults_and_names_the_first_bad_key():
    cfg = Config()
    assert config_check.validate(cfg) is cfg
    with pytest.raises(ConfigError, match=r"^algo\.alpha: expected an integer >= 0 \(0 = synchronous\), got -1$"):
        config_check.validate(Config(algo=AlgoConfig(alpha=-1)))
    bad = Config(tasks=[TaskConfig(name="a/b", env_id="X"), TaskConfig(name="a/b", env_id="")])
    with pytest.raises(ConfigError, match=r"^tasks\.0\.name: expected letters.*\(and 3 more: "):
        config_check.validate(bad)
