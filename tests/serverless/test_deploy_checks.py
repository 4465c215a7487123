"""What `deploy` refuses before any API call, and what a redeploy sends: a one-file module that
imports its own folder, out-of-range or mistyped LAMBDA_* settings, and the function's variables."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from serverless.deploy import deploy, missing_imports_warning, spec_for

HANDLER = "def handler(event, context):\n    return {'reward': 1.0}\n"


def module(folder: Path, name: str, source: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("line, shown", [
    ("from .util import bonus", "from .util import ..."),
    ("from . import util", "from . import ..."),
    ("from my_pkg.util import bonus", "from my_pkg.util import ..."),
    ("import my_pkg.util", "import my_pkg.util"),
    ("from util import bonus", "from util import ..."),  # a module next to it: not in the one-file zip
])
def test_a_one_file_module_importing_its_own_folder_is_refused(tmp_path, line, shown):
    """Deployed as one file, every invoke failed with Runtime.ImportModuleError."""
    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    module(pkg, "util", "def bonus():\n    return 1.0\n")
    path = module(pkg, "scorer", f"{line}\n{HANDLER}")
    with pytest.raises(ValueError) as err:
        spec_for(path)
    message = str(err.value)
    assert message.startswith(f"scorer.py line 1: `{shown}` imports code of its own folder"), message
    assert "inline that code into scorer.py" in message and "--handler scorer.handler" in message


def test_standard_and_third_party_imports_are_not_local(tmp_path):
    (tmp_path / "json.py").write_text("")  # beside it, yet `import json` means the standard library's
    path = module(tmp_path, "scorer", f"import json\nimport numpy\nfrom boto3 import client\n{HANDLER}")
    assert spec_for(path).missing_on_lambda == ["numpy"]


@pytest.mark.parametrize("setting, shown", [
    ("LAMBDA_TIMEOUT_S = 1800", "LAMBDA_TIMEOUT_S = 1800"),
    ("LAMBDA_TIMEOUT_S = 0", "LAMBDA_TIMEOUT_S = 0"),
    ("LAMBDA_TIMEOUT_S = True", "LAMBDA_TIMEOUT_S = True"),
    ("LAMBDA_TIMEOUT_S = '60'", "LAMBDA_TIMEOUT_S = '60'"),
    ("LAMBDA_TIMEOUT_S = 60 * 20", "LAMBDA_TIMEOUT_S = an expression"),
    ("LAMBDA_MEMORY_MB = None", "LAMBDA_MEMORY_MB = None"),
    ("LAMBDA_MEMORY_MB = 64", "LAMBDA_MEMORY_MB = 64"),
    ("LAMBDA_MEMORY_MB = 10241", "LAMBDA_MEMORY_MB = 10241"),
    ("LAMBDA_MEMORY_MB = 512.0", "LAMBDA_MEMORY_MB = 512.0"),
    ("LAMBDA_ENVIRONMENT = {'WEIGHTS': 1}", "LAMBDA_ENVIRONMENT = {'WEIGHTS': 1}"),
    ("LAMBDA_ENVIRONMENT = ['WEIGHTS']", "LAMBDA_ENVIRONMENT = ['WEIGHTS']"),
    ("LAMBDA_ENVIRONMENT = {'1X': 'a'}", "LAMBDA_ENVIRONMENT = {'1X': 'a'}"),
])
def test_a_setting_lambda_refuses_is_refused_before_any_api_call(tmp_path, setting, shown):
    """LAMBDA_TIMEOUT_S = 1800 was refused only after the new code was live; None was a TypeError."""
    path = module(tmp_path, "scorer", f"{setting}\n{HANDLER}")
    with pytest.raises(ValueError, match=r"^scorer\.py: ") as err:
        spec_for(path)
    assert str(err.value).startswith(f"scorer.py: {shown}: expected "), str(err.value)


def test_settings_in_range_are_taken(tmp_path):
    path = module(tmp_path, "scorer", "LAMBDA_MEMORY_MB = 10240\nLAMBDA_TIMEOUT_S: int = 900\n"
                                      f"LAMBDA_ENVIRONMENT = {{'MODEL_PATH': '/opt/m.pt'}}\n{HANDLER}")
    spec = spec_for(path)
    assert (spec.memory_mb, spec.timeout_s, spec.environment) == (10240, 900, {"MODEL_PATH": "/opt/m.pt"})
    assert spec_for(module(tmp_path, "plain", HANDLER)).environment is None


class FakeLambda:
    """The calls deploy() makes, recorded; `refuse_configuration`: UpdateFunctionConfiguration fails."""

    class exceptions:  # noqa: N801 - boto3's attribute name
        ResourceNotFoundException = KeyError

    def __init__(self, configuration: dict, refuse_configuration: bool = False) -> None:
        self.configuration = configuration
        self.refuse_configuration = refuse_configuration
        self.calls: list[tuple[str, dict]] = []

    def get_function(self, FunctionName: str) -> dict:  # noqa: N803 - boto3's parameter names
        return {"Configuration": dict(self.configuration)}

    def get_function_configuration(self, FunctionName: str) -> dict:  # noqa: N803
        return dict(self.configuration)

    def get_waiter(self, name: str):
        return self

    def wait(self, **kw) -> None:
        pass

    def update_function_code(self, **kw) -> dict:
        self.calls.append(("code", kw))
        return {}

    def update_function_configuration(self, **kw) -> dict:
        self.calls.append(("configuration", kw))
        if self.refuse_configuration:
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}},
                              "UpdateFunctionConfiguration")
        self.configuration.update({k: v for k, v in kw.items() if k != "FunctionName"})
        return {}


def current(**kw) -> dict:
    return {"FunctionName": "roll-agentic-scorer", "Handler": "scorer.handler", "Timeout": 30,
            "MemorySize": 256, "Environment": {"Variables": {"REWARD_MODEL_WEIGHTS": "/w.pt"}}, **kw}


def test_a_redeploy_keeps_the_functions_variables_unless_the_module_declares_some(tmp_path):
    """Every redeploy (every training start) sent Environment={}: REWARD_MODEL_WEIGHTS set on the
    function was wiped, and the reward fell back to untrained weights without a word."""
    client = FakeLambda(current(Timeout=10))
    deploy(client, spec_for(module(tmp_path, "scorer", HANDLER)))
    assert [c for c, _ in client.calls] == ["code", "configuration"]
    assert "Environment" not in client.calls[1][1] and client.calls[1][1]["Timeout"] == 30
    assert client.configuration["Environment"] == {"Variables": {"REWARD_MODEL_WEIGHTS": "/w.pt"}}

    client = FakeLambda(current())
    deploy(client, spec_for(module(tmp_path, "scorer", f"LAMBDA_ENVIRONMENT = {{'AB': 'c'}}\n{HANDLER}")))
    assert client.calls[1] == ("configuration", {"FunctionName": "roll-agentic-scorer",
                                                 "Environment": {"Variables": {"AB": "c"}}})


def test_a_configuration_refused_after_the_code_update_says_the_new_code_is_live(tmp_path):
    client = FakeLambda(current(), refuse_configuration=True)
    with pytest.raises(ClientError) as err:
        deploy(client, spec_for(module(tmp_path, "scorer", f"LAMBDA_TIMEOUT_S = 60\n{HANDLER}")))
    message = err.value.response["Error"]["Message"]
    assert message.startswith("Rate exceeded; the new code of roll-agentic-scorer is live, but with its "
                              "previous settings (Timeout 30)"), message
    assert err.value.response["Error"]["Code"] == "TooManyRequestsException"


def test_the_missing_package_warning_says_runs_here_only_of_installed_packages():
    installed = missing_imports_warning("scorer.py", ["numpy"])
    assert "it runs here" in installed and "fails on AWS" in installed
    nowhere = missing_imports_warning("scorer.py", ["numpy", "a_package_nobody_installed"])
    assert "it runs here" not in nowhere
    assert "imports a_package_nobody_installed (and numpy, installed here but not on AWS)" in nowhere
    assert "every invoke fails, here and on AWS" in nowhere
