"""The real boto3 client drives the emulator: shapes, waiters, paginator, errors."""

from __future__ import annotations

import base64
import json

import pytest
from botocore.exceptions import ClientError

from tests.serverless.conftest import client_for, create, make_zip, sdk_headers


def test_create_get_update_delete_with_waiters(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    cfg = create(c, "api-crud", echo_zip, Timeout=5, MemorySize=256, Environment={"Variables": {"GREETING": "hi"}})
    assert cfg["State"] == "Active" and cfg["LastUpdateStatus"] == "Successful"
    assert cfg["Timeout"] == 5 and cfg["MemorySize"] == 256 and cfg["Handler"] == "echo.handler"
    assert cfg["FunctionArn"].endswith(":function:api-crud")
    got = c.get_function(FunctionName="api-crud")
    assert got["Configuration"]["CodeSha256"] == cfg["CodeSha256"]
    out = json.loads(c.invoke(FunctionName="api-crud", Payload=b"{}")["Payload"].read())
    assert out["env"] == "hi" and out["function"] == "api-crud" and 0 < out["remaining_ms"] <= 5000

    with pytest.raises(c.exceptions.ResourceConflictException):
        create(c, "api-crud", echo_zip)

    v2 = make_zip({"echo.py": "def handler(event, context):\n    return {'reward': 2.0}\n"})
    upd = c.update_function_code(FunctionName="api-crud", ZipFile=v2)
    assert upd["CodeSha256"] != cfg["CodeSha256"]
    c.get_waiter("function_updated_v2").wait(FunctionName="api-crud", WaiterConfig={"Delay": 0.1, "MaxAttempts": 50})
    assert json.loads(c.invoke(FunctionName="api-crud", Payload=b"{}")["Payload"].read()) == {"reward": 2.0}

    c.delete_function(FunctionName="api-crud")
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.get_function(FunctionName="api-crud")
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.invoke(FunctionName="api-crud", Payload=b"{}")


def test_list_functions_paginates(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    names = [f"page-{i}" for i in range(5)]
    for n in names:
        create(c, n, echo_zip)
    first = c.list_functions(MaxItems=2)
    assert len(first["Functions"]) == 2 and "NextMarker" in first
    pages = list(c.get_paginator("list_functions").paginate(PaginationConfig={"PageSize": 2}))
    listed = [f["FunctionName"] for p in pages for f in p["Functions"]]
    assert [n for n in listed if n.startswith("page-")] == names
    assert len(pages) >= 3


def test_invoke_types_and_tail_log(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "api-invoke", echo_zip)
    cold = c.invoke(FunctionName="api-invoke", Payload=b'{"reward": 0.5}', LogType="Tail")
    assert cold["StatusCode"] == 200 and cold["ExecutedVersion"] == "$LATEST"
    assert json.loads(cold["Payload"].read())["reward"] == 0.5
    log = base64.b64decode(cold["LogResult"]).decode()
    report = [ln for ln in log.splitlines() if ln.startswith("REPORT RequestId: ")][0]
    for field in ("Duration:", "Billed Duration:", "Memory Size: 128 MB", "Max Memory Used:", "Init Duration:"):
        assert field in report
    assert 'echo {"reward": 0.5}' in log
    warm = c.invoke(FunctionName="api-invoke", Payload=b"{}", LogType="Tail")
    assert "Init Duration" not in base64.b64decode(warm["LogResult"]).decode()

    assert c.invoke(FunctionName="api-invoke", InvocationType="Event", Payload=b"{}")["StatusCode"] == 202
    assert c.invoke(FunctionName="api-invoke", InvocationType="DryRun", Payload=b"{}")["StatusCode"] == 204


def test_unhandled_error_and_bad_requests(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "api-errors", echo_zip)
    resp = c.invoke(FunctionName="api-errors", Payload=b'{"fail": true}')
    assert resp["StatusCode"] == 200 and resp["FunctionError"] == "Unhandled"
    body = json.loads(resp["Payload"].read())
    assert body["errorType"] == "ValueError" and body["errorMessage"] == "asked to fail"
    assert "requestId" in body and any("echo.py" in s for s in body["stackTrace"])
    # The environment survives a handled exception.
    assert "FunctionError" not in c.invoke(FunctionName="api-errors", Payload=b"{}")

    with pytest.raises(c.exceptions.InvalidRequestContentException):
        c.invoke(FunctionName="api-errors", Payload=b"{not json")
    with pytest.raises(c.exceptions.RequestTooLargeException):
        c.invoke(FunctionName="api-errors", Payload=b'"' + b"x" * (6 * 1024 * 1024) + b'"')
    with pytest.raises(c.exceptions.ResourceNotFoundException) as e:
        c.invoke(FunctionName="no-such-function", Payload=b"{}")
    assert "no-such-function" in str(e.value)
    # a version or alias: refused as AWS refuses one that does not exist (it was ignored)
    with pytest.raises(c.exceptions.ResourceNotFoundException, match="serves \\$LATEST only"):
        c.invoke(FunctionName="api-errors", Qualifier="prod", Payload=b"{}")
    assert "FunctionError" not in c.invoke(FunctionName="api-errors", Qualifier="$LATEST", Payload=b"{}")
    with pytest.raises(c.exceptions.InvalidParameterValueException) as e:
        create(c, "api-corrupt", b"PK\x03\x04 definitely not a zip")
    assert "Could not unzip" in str(e.value)
    with pytest.raises(c.exceptions.InvalidParameterValueException):
        create(c, "api-bad-timeout", echo_zip, Timeout=901)


@pytest.mark.parametrize(
    ("handler", "files", "error_type"),
    [
        ("echo.missing", None, "Runtime.HandlerNotFound"),
        ("nosuchmodule.handler", None, "Runtime.ImportModuleError"),
        ("broken.handler", {"broken.py": "def handler(:\n"}, "Runtime.UserCodeSyntaxError"),
    ],
)
def test_init_errors_are_function_errors(shared_endpoint, echo_zip, handler, files, error_type):
    c = client_for(shared_endpoint)
    name = "api-init-" + error_type.split(".")[1].lower()
    create(c, name, make_zip(files) if files else echo_zip, handler=handler)
    resp = c.invoke(FunctionName=name, Payload=b"{}", LogType="Tail")
    assert resp["FunctionError"] == "Unhandled"
    assert json.loads(resp["Payload"].read())["errorType"] == error_type
    assert "Init Duration" in base64.b64decode(resp["LogResult"]).decode()


def test_timeout_kills_and_replaces_the_environment(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "api-timeout", echo_zip, Timeout=1)
    pid = json.loads(c.invoke(FunctionName="api-timeout", Payload=b"{}")["Payload"].read())["pid"]
    resp = c.invoke(FunctionName="api-timeout", Payload=b'{"sleep": 5}')
    body = json.loads(resp["Payload"].read())
    assert resp["FunctionError"] == "Unhandled" and body["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in body["errorMessage"]
    after = c.invoke(FunctionName="api-timeout", Payload=b"{}", LogType="Tail")
    assert json.loads(after["Payload"].read())["pid"] != pid
    assert "Init Duration" in base64.b64decode(after["LogResult"]).decode()


def test_memory_limit(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "api-memory", echo_zip, MemorySize=128)
    over_rss = c.invoke(FunctionName="api-memory", Payload=b'{"allocate_mb": 300}')
    assert json.loads(over_rss["Payload"].read())["errorType"] == "Runtime.OutOfMemory"
    over_as = c.invoke(FunctionName="api-memory", Payload=b'{"allocate_mb": 4000}')
    assert json.loads(over_as["Payload"].read())["errorType"] == "Runtime.OutOfMemory"
    assert "FunctionError" not in c.invoke(FunctionName="api-memory", Payload=b'{"allocate_mb": 10}')


def test_event_invocations_retry_twice(shared_endpoint, echo_zip, tmp_path):
    import time

    c = client_for(shared_endpoint)
    create(c, "api-event", echo_zip)
    ok_file, bad_file = tmp_path / "ok", tmp_path / "bad"
    c.invoke(FunctionName="api-event", InvocationType="Event", Payload=json.dumps({"count_to": str(ok_file)}).encode())
    c.invoke(FunctionName="api-event", InvocationType="Event",
             Payload=json.dumps({"count_to": str(bad_file), "fail_after_count": True}).encode())
    deadline = time.time() + 10
    while time.time() < deadline and not (bad_file.exists() and len(bad_file.read_text()) >= 3):
        time.sleep(0.05)
    time.sleep(0.3)  # a fourth attempt would have happened by now
    assert ok_file.read_text() == "x"
    assert bad_file.read_text() == "xxx"
    with pytest.raises(c.exceptions.RequestTooLargeException):
        c.invoke(FunctionName="api-event", InvocationType="Event", Payload=b'"' + b"x" * (1024 * 1024 + 1) + b'"')


def test_unknown_route_is_an_aws_error(shared_endpoint):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(shared_endpoint + "/2015-03-31/nothing-here", headers=sdk_headers())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 404 and e.value.headers["x-amzn-ErrorType"] == "UnknownOperationException"


def test_client_error_shape(shared_endpoint):
    c = client_for(shared_endpoint)
    with pytest.raises(ClientError) as e:
        c.get_function_configuration(FunctionName="absent")
    err = e.value.response
    assert err["Error"]["Code"] == "ResourceNotFoundException"
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 404


def _raw(endpoint: str, method: str, path: str, body: bytes = b"") -> tuple[int, str]:
    """One request with an unchecked signature (the emulator here has no credentials): status and error type."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(endpoint + path, data=body or None, method=method, headers=sdk_headers())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("x-amzn-ErrorType", "")


@pytest.mark.parametrize(
    ("method", "path", "body", "error_type"),
    [
        ("POST", "/2015-03-31/functions", b"[" * 100_000 + b"]" * 100_000, "InvalidRequestContentException"),
        ("POST", "/2015-03-31/functions/api-crud/invocations", b"[" * 100_000 + b"]" * 100_000,
         "InvalidRequestContentException"),
        ("POST", "/2015-03-31/functions", b'{"FunctionName": "api-x", "Handler": "a.b", "Runtime": "python3.11", "Code": ["ZipFile"]}',
         "InvalidParameterValueException"),
        ("PUT", "/2015-03-31/functions/api-crud/configuration", b'{"Environment": "x"}',
         "InvalidParameterValueException"),
        ("PUT", "/2015-03-31/functions/api-crud/configuration", b'{"Environment": {"Variables": {"A=B": "c"}}}',
         "InvalidParameterValueException"),
        ("POST", "/2015-03-31/functions", b'{"FunctionName": "api-x", "Handler": "../../etc.handler", "Runtime": "python3.11"}',
         "InvalidParameterValueException"),
        ("POST", "/2015-03-31/functions", b'{"FunctionName": "api-x", "Handler": "a.b", "Runtime": "nodejs20.x"}',
         "InvalidParameterValueException"),
        ("GET", "/_emulator/logs/..%2F..%2Femulator", b"", "ValidationException"),  # a name, as AWS validates one
        ("GET", "/_emulator/logs/api-crud?lines=abc", b"", "InvalidParameterValueException"),
        ("GET", "/_emulator/logs/api-crud?lines=0", b"", "InvalidParameterValueException"),
    ],
)
def test_malformed_requests_are_400s_not_500s(shared_endpoint, echo_zip, method, path, body, error_type):
    """Each names what is wrong; before, these were 500 ServiceExceptions (which callers retry)
    and the log route read any *.log file it was pointed at."""
    c = client_for(shared_endpoint)
    if "api-crud" not in [f["FunctionName"] for f in c.list_functions()["Functions"]]:
        create(c, "api-crud", echo_zip)
    assert _raw(shared_endpoint, method, path, body) == (400, error_type)


def _zip_with(method: int | None = None, encrypted: bool = False, corrupt: bool = False) -> bytes:
    """A one-file deflated zip, its headers or data then damaged as asked."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("echo.py", "def handler(event, context):\n    return {'reward': 1.0}\n" * 40)
    data = bytearray(buf.getvalue())
    central = data.rfind(b"PK\x01\x02")
    if method is not None:  # the method field of the local header and of the central directory
        data[8], data[central + 10] = method, method
    if encrypted:  # bit 0 of the general-purpose flags
        data[6] |= 1
        data[central + 8] |= 1
    if corrupt:  # the deflate stream's first block is of a type that does not exist (zlib.error)
        data[30 + len("echo.py")] = 0xFF
    return bytes(data)


def _zip_bomb(unzipped_mb: int) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("echo.py", "def handler(event, context):\n    return 1\n")
        with zf.open("zeros.bin", "w") as f:
            for _ in range(unzipped_mb):
                f.write(bytes(1 << 20))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("make_zip_bytes", "message"),
    [
        (lambda: _zip_with(corrupt=True), "Could not unzip"),  # zlib.error: a 500 before
        (lambda: _zip_with(method=99), "Could not unzip"),  # NotImplementedError: a 500 before
        (lambda: _zip_with(encrypted=True), "Could not unzip"),  # RuntimeError: password required
        (lambda: _zip_bomb(260), "Unzipped size must be smaller than 262144000 bytes"),  # was accepted and unpacked
    ],
    ids=["corrupt-deflate", "unknown-method", "encrypted", "over-250MB-unzipped"],
)
def test_bad_zip_files_are_400s_that_say_so(shared_endpoint, make_zip_bytes, message):
    c = client_for(shared_endpoint)
    with pytest.raises(c.exceptions.InvalidParameterValueException, match=message):
        create(c, "api-bad-zip", make_zip_bytes())
    with pytest.raises(c.exceptions.ResourceNotFoundException):
        c.get_function(FunctionName="api-bad-zip")


def test_a_refused_configuration_update_changes_nothing(shared_endpoint, echo_zip):
    """A valid Handler next to an invalid Timeout was applied although the update was refused."""
    c = client_for(shared_endpoint)
    before = create(c, "api-atomic-update", echo_zip, Timeout=5)
    with pytest.raises(c.exceptions.InvalidParameterValueException):
        c.update_function_configuration(FunctionName="api-atomic-update", Handler="other.handler", Timeout=901)
    with pytest.raises(c.exceptions.InvalidParameterValueException):
        c.update_function_configuration(FunctionName="api-atomic-update", MemorySize=256,
                                        Environment={"Variables": {"x": "1"}})  # a one-letter name
    after = c.get_function_configuration(FunctionName="api-atomic-update")
    for key in ("Handler", "Timeout", "MemorySize", "Environment", "RevisionId"):
        assert after[key] == before[key], key
    assert "FunctionError" not in c.invoke(FunctionName="api-atomic-update", Payload=b"{}")


def test_environment_variables_over_4kb_are_refused_not_500s_at_every_invoke(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "api-big-env", echo_zip)
    with pytest.raises(c.exceptions.InvalidParameterValueException, match="4KB"):
        c.update_function_configuration(FunctionName="api-big-env", Environment={"Variables": {"BIG": "x" * 200_000}})
    with pytest.raises(c.exceptions.InvalidParameterValueException, match="4KB"):
        create(c, "api-big-env-2", echo_zip, Environment={"Variables": {"BIG": "x" * 5000}})
    c.update_function_configuration(FunctionName="api-big-env", Environment={"Variables": {"GREETING": "x" * 4000}})
    c.get_waiter("function_updated_v2").wait(FunctionName="api-big-env", WaiterConfig={"Delay": 0.1, "MaxAttempts": 50})
    assert json.loads(c.invoke(FunctionName="api-big-env", Payload=b"{}")["Payload"].read())["env"] == "x" * 4000


def test_an_event_that_cannot_run_is_a_logged_failed_attempt_not_lost(shared_endpoint, echo_zip, tmp_path):
    """An Event queued before an update whose code could not be unpacked died with its task
    ("Task exception was never retrieved"): no attempt, no retry, no log line, no error."""
    import io
    import time
    import zipfile

    from serverless.cli import emulator_call

    c = client_for(shared_endpoint)
    create(c, "api-event-failed-update", echo_zip)
    c.put_function_concurrency(FunctionName="api-event-failed-update", ReservedConcurrentExecutions=0)  # held queued
    rid = c.invoke(FunctionName="api-event-failed-update", InvocationType="Event",
                   Payload=json.dumps({"count_to": str(tmp_path / "ran")}).encode())["ResponseMetadata"]["RequestId"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:  # a file `a` and a file inside a directory `a`: cannot be unpacked
        zf.writestr("a", "x")
        zf.writestr("a/b", "y")
    c.update_function_code(FunctionName="api-event-failed-update", ZipFile=buf.getvalue())
    with pytest.raises(Exception, match="Failed"):
        c.get_waiter("function_updated_v2").wait(FunctionName="api-event-failed-update",
                                                 WaiterConfig={"Delay": 0.1, "MaxAttempts": 50})
    c.delete_function_concurrency(FunctionName="api-event-failed-update")

    def stats() -> dict:
        return json.loads(emulator_call(shared_endpoint, "GET", "/_emulator/stats"))

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and stats()["functions"]["api-event-failed-update"]["errors"] < 3:
        time.sleep(0.05)
    assert stats()["functions"]["api-event-failed-update"]["errors"] == 3  # the first try and two retries
    log = emulator_call(shared_endpoint, "GET", "/_emulator/logs/api-event-failed-update").decode()
    assert log.count(f"EVENT RequestId: {rid} could not run: RuntimeError: the function is Failed") == 3
    assert not (tmp_path / "ran").exists()
