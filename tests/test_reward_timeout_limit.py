"""reward.timeout_s is the Lambda functions' timeout with reward.mode=serverless: Lambda takes
at most 900 s, so more is refused when the config is read, not after Ray and the emulator started."""

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.config_check import _uses_reward_timeout
from roll_agentic.hydra_config import load_config


def test_more_than_900_s_is_refused_with_serverless_rewards():
    with pytest.raises(ConfigError) as err:
        load_config(["reward=serverless", "reward.timeout_s=1200"])
    msg = str(err.value)
    assert "reward.timeout_s: expected at most 900 seconds with reward.mode=serverless" in msg
    assert "AWS Lambda's limit is 900 s" in msg and "1200" in msg


@pytest.mark.parametrize("overrides", [["reward=serverless", "reward.timeout_s=900"],
                                       ["reward.mode=local", "reward.timeout_s=1200"]])
def test_900_s_or_local_rewards_pass(overrides):
    load_config(overrides)


def test_a_module_that_declares_its_own_timeout_does_not_use_it(tmp_path, monkeypatch):
    pkg = tmp_path / "my_timeout_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "own.py").write_text("LAMBDA_TIMEOUT_S = 60\n\ndef handler(event, context):\n    return 0\n")
    (pkg / "plain.py").write_text("def handler(event, context):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not _uses_reward_timeout("my_timeout_pkg.own")
    assert _uses_reward_timeout("my_timeout_pkg.plain")
    assert _uses_reward_timeout("frozenlake")
