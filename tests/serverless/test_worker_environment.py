"""What a function's environment holds: its own variables, Lambda's, and only what the interpreter
needs of the host's. Inheriting all of the host's, a variable set only in the shell worked here
and was missing on AWS (a reward model silently back on untrained weights)."""

from __future__ import annotations

import json

from serverless.environments import host_environment
from tests.serverless.conftest import client_for, create, make_zip

ENV_ZIP = make_zip({"app.py": '''
    import os

    def handler(event, context):
        return {"reward": 1.0, "env": dict(os.environ)}
    '''})


def test_a_host_only_variable_is_not_the_functions(start_emulator, tmp_path, monkeypatch):
    monkeypatch.setenv("REWARD_MODEL_WEIGHTS", "/only/in/the/shell.pt")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    url = start_emulator(tmp_path / "state")
    c = client_for(url)
    create(c, "env-host", ENV_ZIP, handler="app.handler", Environment={"Variables": {"GREETING": "hi"}})
    env = json.loads(c.invoke(FunctionName="env-host", Payload=b"{}")["Payload"].read())["env"]
    assert "REWARD_MODEL_WEIGHTS" not in env
    assert env["GREETING"] == "hi" and env["LC_ALL"] == "C.UTF-8" and env["PATH"]
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "env-host"
    assert not [k for k in env if k.startswith("ROLL_AGENTIC_SERVERLESS_")]


def test_host_environment_keeps_what_the_interpreter_needs():
    host = {"PATH": "/bin", "HOME": "/h", "LC_CTYPE": "C", "PYTHONHASHSEED": "0", "TMPDIR": "/t",
            "LD_LIBRARY_PATH": "/l", "AWS_SECRET_ACCESS_KEY": "s", "ROLL_AGENTIC_SERVERLESS_SECRET_KEY": "k",
            "MY_VAR": "x"}
    assert set(host_environment(host)) == {"PATH", "HOME", "LC_CTYPE", "PYTHONHASHSEED", "TMPDIR", "LD_LIBRARY_PATH"}
