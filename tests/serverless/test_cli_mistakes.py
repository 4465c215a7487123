"""A newcomer's mistakes with `serverless deploy` and `start`: each is one line, before anything is sent."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from serverless import cli
from serverless.deploy import module_settings, spec_for

NOWHERE = "http://127.0.0.1:1"  # never reached: every mistake here is caught before a request


def _deploy(capsys, *argv: str) -> tuple[int | str | None, str]:
    """Runs `serverless deploy ...`; (the exit code or message, stderr)."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["deploy", *argv, "--endpoint-url", NOWHERE])
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture
def bad_module(tmp_path, monkeypatch):
    (tmp_path / "badpkg").mkdir()
    (tmp_path / "badpkg" / "__init__.py").write_text("")
    (tmp_path / "badpkg" / "bad_reward.py").write_text("import json\n\ndef handler(:\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "badpkg" or m.startswith("badpkg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "badpkg" / "bad_reward.py"


@pytest.mark.parametrize("given", ["badpkg/bad_reward.py", "badpkg.bad_reward"])
def test_a_module_with_a_syntax_error_is_one_line_naming_file_and_line(bad_module, capsys, given):
    """It printed a 20-line traceback ending in `File "<unknown>", line 3 ... SyntaxError`."""
    code, err = _deploy(capsys, given)
    assert isinstance(code, str) and "\n" not in code and "Traceback" not in err
    assert code.startswith("deploy: ") and "bad_reward.py, line 3" in code and "syntax error" in code


def test_module_settings_names_the_file_of_a_syntax_error(bad_module):
    with pytest.raises(ValueError, match=r"bad_reward\.py, line 3: .*syntax error"):
        module_settings(bad_module)


def test_an_explicit_setting_is_not_replaced_by_the_default(tmp_path):
    """`x or default` made --timeout 0 deploy with 30 s: the service must see (and refuse) it."""
    mod = tmp_path / "scorer.py"
    mod.write_text("LAMBDA_MEMORY_MB = 640\nLAMBDA_TIMEOUT_S = 42\ndef handler(e, c):\n    return 1\n")
    spec = spec_for(mod, memory_mb=0, timeout_s=0)
    assert (spec.memory_mb, spec.timeout_s) == (0, 0)
    assert (spec_for(mod).memory_mb, spec_for(mod).timeout_s) == (640, 42)


@pytest.mark.parametrize("flag, value, says", [
    ("--timeout", "0", "must be 1 to 900 s (AWS Lambda's limits), got 0"),
    ("--timeout", "901", "must be 1 to 900 s"),
    ("--memory", "0", "must be 128 to 10240 MB (AWS Lambda's limits), got 0"),
    ("--memory", "-5", "must be 128 to 10240 MB"),
    ("--memory", "10241", "must be 128 to 10240 MB"),
    ("--timeout", "ten", "expected an integer, got 'ten'"),
])
def test_settings_outside_lambdas_limits_are_refused_by_the_flag(tmp_path, capsys, flag, value, says):
    mod = tmp_path / "scorer.py"
    mod.write_text("def handler(e, c):\n    return 1\n")
    code, err = _deploy(capsys, str(mod), flag, value)
    assert code == 2 and f"argument {flag}: {says}" in err and "Traceback" not in err


def test_a_folder_without_its_handlers_module_is_refused(tmp_path, capsys):
    """Deployed anyway, it failed only at invoke: Runtime.ImportModuleError: No module named 'app_dir'."""
    folder = tmp_path / "app_dir"
    (folder / "pkg").mkdir(parents=True)
    (folder / "main.py").write_text("def handler(e, c):\n    return 1\n")
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "scoring.py").write_text("def handler(e, c):\n    return 1\n")
    code, err = _deploy(capsys, str(folder))
    assert isinstance(code, str) and "\n" not in code and "Traceback" not in err
    assert f"{folder} has no app_dir.py for handler 'app_dir.handler'" in code
    assert "--handler main.handler" in code  # an example from what the folder holds
    with pytest.raises(ValueError, match="has no nope.py"):
        spec_for(folder, handler="nope.handler")
    with pytest.raises(ValueError, match="is not module.function"):
        spec_for(folder, handler="handler")
    assert spec_for(folder, handler="main.handler").handler == "main.handler"
    assert spec_for(folder, handler="pkg.scoring.handler").handler == "pkg.scoring.handler"
    assert spec_for(folder, handler="pkg.handler").handler == "pkg.handler"  # pkg/__init__.py


def test_start_on_a_port_in_use_is_one_line(tmp_path):
    """It printed an OSError traceback (errno 98)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "serverless.cli", "start", "--port", str(port),
                              "--state-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}: the port is taken" in lines[0]
    assert "--port 0" in lines[0] and "roll-agentic serverless stop" in lines[0]
    assert not (tmp_path / "endpoint.json").exists()


def test_a_file_without_its_handler_is_refused_at_deploy(tmp_path, capsys):
    """It deployed as Active, and every invoke then failed with Runtime.HandlerNotFound."""
    mod = tmp_path / "noh_reward.py"
    mod.write_text("def reward(summary):\n    return 1.0\n")
    code, err = _deploy(capsys, str(mod))
    assert isinstance(code, str) and "\n" not in code and "Traceback" not in err
    assert "noh_reward.py has no function handler(event, context)" in code
    bound = tmp_path / "bound.py"  # a handler bound otherwise than by `def` still counts
    bound.write_text("from json import loads as handler\n")
    assert spec_for(bound).handler == "bound.handler"


@pytest.mark.parametrize("given, says", [
    ("code_exe", "nothing to deploy at code_exe: no such file or folder here, and reward 'code_exe' is "
                 "not a module in rewards/ (did you mean code_exec?)"),
    ("rewards/code_exe.py", "nothing to deploy at rewards/code_exe.py: no such file or folder "
                            "(did you mean rewards/code_exec.py?)"),
    # The package prefix and a typo: the prefix's fix named the typo too, and deploy said neither.
    ("rewards.code_exe", "nothing to deploy at rewards.code_exe: no such file or folder; as a module name, "
                         "expected 'code_exec' alone for a module in rewards/ (there is no 'code_exe')"),
])
def test_deploy_of_a_misspelt_reward_names_the_close_one(capsys, monkeypatch, given, says):
    """`train` said "did you mean my_reward?" for `reward: my_rewrd`; `deploy my_rewrd` said only
    "nothing to deploy at my_rewrd: expected a .py module or a directory"."""
    monkeypatch.chdir(cli.Path(__file__).resolve().parents[2])  # the repo: rewards/code_exec.py
    code, err = _deploy(capsys, given)
    assert isinstance(code, str) and "\n" not in code and "Traceback" not in err
    assert code == f"deploy: {says}"


def test_deploy_of_a_name_with_nothing_close_says_as_before(tmp_path, capsys):
    code, _err = _deploy(capsys, str(tmp_path / "zzz_nothing.py"))
    assert code == f"deploy: nothing to deploy at {tmp_path / 'zzz_nothing.py'}: expected a .py module or a directory"


def test_invoke_and_logs_of_the_module_name_suggest_the_deployed_name(start_emulator, tmp_path, capsys):
    """`deploy my_reward.py` names the function roll-agentic-my_reward; `invoke my_reward` said only
    "ResourceNotFoundException: Function not found: ...:function:my_reward"."""
    endpoint = start_emulator(tmp_path / "state")
    mod = tmp_path / "my_reward.py"
    mod.write_text("def handler(event, context):\n    return {'reward': 1.0}\n")
    assert cli.main(["deploy", str(mod), "--endpoint-url", endpoint]) == 0
    assert f"deployed {cli.FUNCTION_PREFIX}my_reward " in capsys.readouterr().out
    lists = "(`roll-agentic serverless list` shows the deployed names)"

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            cli.main([*argv, "--endpoint-url", endpoint])
        assert isinstance(exit_.value.code, str) and "\n" not in exit_.value.code
        return exit_.value.code

    for command in ("invoke", "logs"):
        said = refused(command, "my_reward")
        assert said.startswith(f"{command}: ResourceNotFoundException: Function not found: ")
        assert said.endswith(f"; did you mean roll-agentic-my_reward? {lists}")
    for misspelt in ("roll-agentic-my_rewrd", "my_rewrd"):
        assert refused("invoke", misspelt).endswith(f"; did you mean roll-agentic-my_reward? {lists}")
    assert refused("invoke", "nothing_like_it").endswith(f"function:nothing_like_it {lists}")
    assert cli.main(["invoke", "roll-agentic-my_reward", "--endpoint-url", endpoint]) == 0
    assert '"reward": 1.0' in capsys.readouterr().out


def test_a_name_without_the_prefix_gets_it_when_the_list_cannot_be_read(monkeypatch):
    import argparse

    def unreachable(_args):
        raise OSError("no endpoint")

    monkeypatch.setattr(cli, "_client", unreachable)
    args = argparse.Namespace(serverless_cmd="invoke", name="my_reward")
    assert cli._name_hint(args).startswith("; did you mean roll-agentic-my_reward? (")
    args.name = "roll-agentic-other"
    assert cli._name_hint(args) == " (`roll-agentic serverless list` shows the deployed names)"
    args.name = "arn:aws:lambda:us-east-1:000000000000:function:my_reward"  # an ARN is taken as given
    assert cli._name_hint(args) == ""
