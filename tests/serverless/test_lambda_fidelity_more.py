"""Where the emulator let code pass that AWS Lambda refuses (or refused code AWS runs).

Each case is what AWS answers (botocore's `lambda/2015-03-31` model, Lambda's API
reference, awslambdaric's runtime): code written against the emulator must
behave the same tomorrow against the real service.
"""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError

from tests.serverless.conftest import client_for, create, make_zip, sdk_headers

ROLE = "arn:aws:iam::000000000000:role/test"
APP = '''
import decimal

def handler(event, context):
    kind = event.get("kind")
    if kind == "decimal":
        return {"score": decimal.Decimal("1.50"), "n": decimal.Decimal("3")}
    if kind == "bytes":
        return b"raw \\x00 bytes"
    if kind == "context":
        return {"memory": context.memory_limit_in_mb, "client_context": repr(context.client_context),
                "custom": context.client_context.custom if context.client_context else None,
                "identity": context.identity.cognito_identity_id, "group": context.log_group_name}
    return {"ok": True}
'''


def _code(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


def test_no_waiter_no_success_pending_and_in_progress_are_409s(shared_endpoint, echo_zip):
    """Lambda refuses an Invoke of a Pending function and an update while the last one is
    InProgress (ResourceConflictException); the emulator waited, so code without the waiters
    passed here and failed on AWS."""
    c = client_for(shared_endpoint)
    c.create_function(FunctionName="fid-states", Runtime="python3.11", Role=ROLE, Handler="echo.handler",
                      Code={"ZipFile": echo_zip})
    with pytest.raises(c.exceptions.ResourceConflictException, match="following state: Pending"):
        c.invoke(FunctionName="fid-states", Payload=b"{}")
    with pytest.raises(c.exceptions.ResourceConflictException, match="Pending"):
        c.update_function_configuration(FunctionName="fid-states", Timeout=10)
    wait = {"Delay": 0.1, "MaxAttempts": 100}
    c.get_waiter("function_active_v2").wait(FunctionName="fid-states", WaiterConfig=wait)

    c.update_function_code(FunctionName="fid-states", ZipFile=make_zip({"echo.py": "def handler(e, c):\n    return 2\n"}))
    with pytest.raises(c.exceptions.ResourceConflictException, match="An update is in progress for resource: arn:aws:lambda:"):
        c.update_function_configuration(FunctionName="fid-states", Timeout=10)
    c.get_waiter("function_updated_v2").wait(FunctionName="fid-states", WaiterConfig=wait)

    upd = c.update_function_configuration(FunctionName="fid-states", Timeout=10)
    assert upd["LastUpdateStatus"] == "InProgress"  # as AWS answers it: the waiter is needed
    with pytest.raises(c.exceptions.ResourceConflictException, match="An update is in progress"):
        c.update_function_code(FunctionName="fid-states", ZipFile=echo_zip)
    assert json.loads(c.invoke(FunctionName="fid-states", Payload=b"{}")["Payload"].read()) == 2  # invokes go on
    c.get_waiter("function_updated_v2").wait(FunctionName="fid-states", WaiterConfig=wait)
    cfg = c.get_function_configuration(FunctionName="fid-states")
    assert (cfg["Timeout"], cfg["LastUpdateStatus"]) == (10, "Successful")


def test_list_functions_leaves_out_the_state_fields(shared_endpoint, echo_zip):
    """"To get the additional fields (State, ..., LastUpdateStatus, ...) use GetFunction":
    code reading f["State"] from ListFunctions worked here and raised KeyError on AWS."""
    c = client_for(shared_endpoint)
    create(c, "fid-list", echo_zip)
    listed = [f for f in c.list_functions()["Functions"] if f["FunctionName"] == "fid-list"][0]
    assert "State" not in listed and "LastUpdateStatus" not in listed
    assert listed["Handler"] == "echo.handler" and listed["RevisionId"]


def test_qualifiers_are_not_ignored(shared_endpoint, echo_zip):
    """A version or alias does not exist here: DeleteFunction(Qualifier="1") deleted the whole
    function, Get* answered for $LATEST, and an ARN or `name:alias` with one invoked $LATEST."""
    c = client_for(shared_endpoint)
    create(c, "fid-qual", echo_zip)
    arn = c.get_function_configuration(FunctionName="fid-qual")["FunctionArn"]
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.delete_function(FunctionName="fid-qual", Qualifier="1")
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.get_function(FunctionName="fid-qual", Qualifier="prod")
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.get_function_configuration(FunctionName="fid-qual", Qualifier="7")
    for name in (f"{arn}:prod", "fid-qual:prod"):
        with pytest.raises(c.exceptions.ResourceNotFoundException):
            c.invoke(FunctionName=name, Payload=b"{}")
    assert c.get_function(FunctionName="fid-qual", Qualifier="$LATEST")["Configuration"]["FunctionName"] == "fid-qual"
    assert "FunctionError" not in c.invoke(FunctionName=f"{arn}:$LATEST", Payload=b"{}")
    assert "FunctionError" not in c.invoke(FunctionName="fid-qual:$LATEST", Payload=b"{}")


@pytest.mark.parametrize(
    ("kwargs", "code", "says"),
    [
        ({"FunctionName": "bad name"}, "ValidationException", "at 'functionName' failed to satisfy constraint"),
        ({"FunctionName": "x" * 65}, "InvalidParameterValueException", "length less than or equal to 64"),
        ({"Runtime": "python3.99"}, "ValidationException", "at 'runtime'"),
        ({"Runtime": "python3.8"}, "InvalidParameterValueException", "no longer supported"),
        ({"Role": "lambda-role"}, "ValidationException", "at 'role'"),
        ({"Description": "d" * 257}, "ValidationException", "at 'description'"),
        ({"Handler": "app handler"}, "ValidationException", "at 'handler'"),
        ({"Environment": {"Variables": {"AWS_REGION": "eu-west-1"}}}, "InvalidParameterValueException", "reserved keys"),
    ],
    ids=["name-pattern", "name-length", "runtime-enum", "runtime-deprecated", "role-pattern", "description-length",
         "handler-whitespace", "reserved-env"],
)
def test_create_refuses_what_aws_refuses(shared_endpoint, echo_zip, kwargs, code, says):
    """ValidationException is not in Lambda's model: botocore raises a plain ClientError, so
    `except client.exceptions.InvalidParameterValueException` must not catch it here either."""
    c = client_for(shared_endpoint)
    args = {"FunctionName": "fid-create-bad", "Runtime": "python3.11", "Role": ROLE, "Handler": "echo.handler",
            "Code": {"ZipFile": echo_zip}, **kwargs}
    with pytest.raises(ClientError) as e:
        c.create_function(**args)
    assert _code(e) == code and says in e.value.response["Error"]["Message"]
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_get_with_a_malformed_name_is_a_validation_exception(shared_endpoint):
    c = client_for(shared_endpoint)
    with pytest.raises(ClientError) as e:
        c.get_function(FunctionName="no/slashes")
    assert _code(e) == "ValidationException"


def test_create_without_a_runtime_is_refused_not_python311(shared_endpoint, echo_zip):
    """Lambda has no default runtime for a zip package."""
    import urllib.error
    import urllib.request

    body = json.dumps({"FunctionName": "fid-no-runtime", "Role": ROLE, "Handler": "echo.handler",
                       "Code": {"ZipFile": base64.b64encode(echo_zip).decode()}}).encode()
    req = urllib.request.Request(shared_endpoint + "/2015-03-31/functions", data=body, method="POST", headers=sdk_headers())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and e.value.headers["x-amzn-ErrorType"] == "InvalidParameterValueException"


def test_update_configuration_checks_the_revision_id(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    cfg = create(c, "fid-revision", echo_zip)
    with pytest.raises(c.exceptions.PreconditionFailedException):
        c.update_function_configuration(FunctionName="fid-revision", Timeout=9, RevisionId="not-the-latest")
    assert c.get_function_configuration(FunctionName="fid-revision")["Timeout"] == cfg["Timeout"]
    c.update_function_configuration(FunctionName="fid-revision", Timeout=9, RevisionId=cfg["RevisionId"])


def test_the_runtime_marshals_and_gives_context_as_lambdas_does(shared_endpoint):
    """awslambdaric: a Decimal is a JSON number, bytes go back as they are, and the context's
    memory_limit_in_mb is a str, with client_context and identity attributes."""
    c = client_for(shared_endpoint)
    create(c, "fid-runtime", make_zip({"app.py": APP}), handler="app.handler")
    dec = c.invoke(FunctionName="fid-runtime", Payload=b'{"kind": "decimal"}')
    assert "FunctionError" not in dec and dec["Payload"].read() == b'{"score": 1.50, "n": 3}'
    raw = c.invoke(FunctionName="fid-runtime", Payload=b'{"kind": "bytes"}')
    assert "FunctionError" not in raw and raw["Payload"].read() == b"raw \x00 bytes"
    ctx = json.loads(c.invoke(FunctionName="fid-runtime", Payload=b'{"kind": "context"}')["Payload"].read())
    assert ctx["memory"] == "128" and ctx["client_context"] == "None" and ctx["identity"] is None
    assert ctx["group"] == "/aws/lambda/fid-runtime"
    sent = base64.b64encode(json.dumps({"custom": {"run": "r1"}}).encode()).decode()
    ctx = json.loads(c.invoke(FunctionName="fid-runtime", ClientContext=sent, Payload=b'{"kind": "context"}')["Payload"].read())
    assert ctx["custom"] == {"run": "r1"}


def test_a_handler_in_a_subdirectory_runs_as_on_lambda(shared_endpoint):
    """Lambda's Python runtime imports `src/app.handler` as `src.app`; it was refused here."""
    c = client_for(shared_endpoint)
    create(c, "fid-subdir", make_zip({"src/__init__.py": "", "src/app.py": APP}), handler="src/app.handler")
    assert json.loads(c.invoke(FunctionName="fid-subdir", Payload=b"{}")["Payload"].read()) == {"ok": True}
