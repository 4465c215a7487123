"""Which failures recur on every retry (the user's code) and which may pass (roll_agentic/failures.py)."""

import pytest

from roll_agentic.failures import deterministic_error, deterministic_type_name


class SimulatorDown(RuntimeError):
    pass


class ReadTimeout(Exception):  # a library's time-out that is no OSError
    pass


def _chained():
    try:
        raise ConnectionRefusedError(111, "refused")
    except ConnectionRefusedError as err:
        raise SimulatorDown("the simulator is not up") from err


def test_exceptions_of_the_users_code_recur_and_network_or_time_outs_may_pass():
    assert deterministic_error(KeyError("answer")) and deterministic_error(TypeError("bad"))
    assert not deterministic_error(ConnectionResetError()) and not deterministic_error(TimeoutError())
    assert not deterministic_error(ReadTimeout())
    with pytest.raises(SimulatorDown) as err:
        _chained()
    assert not deterministic_error(err.value)  # caused by a refused connection


@pytest.mark.parametrize("name, deterministic", [
    ("KeyError", True), ("ZeroDivisionError", True), ("Runtime.ImportModuleError", True),
    ("Runtime.HandlerNotFound", True), ("Function.ResponseSizeTooLarge", True), ("EnvContractError", True),
    ("ConnectionError", False), ("TimeoutError", False), ("OSError", False), ("ReadTimeout", False),
    ("NewConnectionError", False), ("Sandbox.Timedout", False), ("Runtime.ExitError", False),
    ("Runtime.OutOfMemory", False), ("", False),
])
def test_a_lambda_error_type_is_classified_by_its_name(name, deterministic):
    assert deterministic_type_name(name) is deterministic
