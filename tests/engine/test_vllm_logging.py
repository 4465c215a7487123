"""vLLM's expected start-up warnings are filtered in the processes vLLM starts; others still show."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from roll_agentic.engine import vllm_logging
from roll_agentic.engine.vllm_logging import ExpectedNoise, quiet_expected_warnings

pytest.importorskip("vllm")

# A child process configures vLLM's logging from the file, as an engine core does.
CHILD = """
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging, init_logger
configure_logging(LoggingConfig())  # what vLLM's engine classes do as they start
log = init_logger("vllm.some.module")
log.warning("Enforce eager set, disabling torch.compile")
log.warning("the KV cache is too small for one sequence")
"""


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("vllm.x", logging.WARNING, __file__, 1, msg, None, None)


def test_filter_drops_only_expected_messages():
    f = ExpectedNoise()
    assert not f.filter(_record("libtcmalloc is not found in LD_PRELOAD. For best performance ..."))
    assert f.filter(_record("the KV cache is too small for one sequence"))


def _env_after_quieting(monkeypatch, **env: str) -> dict[str, str]:
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    quiet_expected_warnings()
    return dict(os.environ)


def test_vllm_process_shows_real_warnings_and_hides_expected_ones(monkeypatch):
    env = _env_after_quieting(monkeypatch)
    assert env["VLLM_LOGGING_CONFIG_PATH"]
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "the KV cache is too small" in out.stdout
    assert "Enforce eager" not in out.stdout + out.stderr


@pytest.mark.parametrize("env", [{"VLLM_LOGGING_LEVEL": "INFO"}, {"VLLM_LOGGING_CONFIG_PATH": "/dev/null"}])
def test_a_users_own_choice_is_left_alone(monkeypatch, env):
    after = _env_after_quieting(monkeypatch, **env)
    assert after.get("VLLM_LOGGING_CONFIG_PATH") == env.get("VLLM_LOGGING_CONFIG_PATH")


def test_config_is_vllms_default_shape():
    cfg = vllm_logging.logging_config("WARNING")
    assert cfg["loggers"]["vllm"]["propagate"] is False
    assert cfg["handlers"]["vllm"]["filters"] == ["expected_noise"]


def test_vllm_starts_when_the_user_turned_its_logging_setup_off(monkeypatch):
    """VLLM_CONFIGURE_LOGGING=0 with a config file is an error in vLLM: none is named then."""
    env = _env_after_quieting(monkeypatch, VLLM_CONFIGURE_LOGGING="0")
    assert "VLLM_LOGGING_CONFIG_PATH" not in env
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_file_is_this_users_own_and_written_again_if_removed(monkeypatch):
    env = _env_after_quieting(monkeypatch)
    path = env["VLLM_LOGGING_CONFIG_PATH"]
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    os.remove(path)  # a temp cleaner on a long run
    quiet_expected_warnings()  # the next engine start
    assert os.path.exists(path)
