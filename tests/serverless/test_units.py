"""The emulator's parts without a server: signatures, leases, meters, names, packages."""

from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from serverless import errors, sigv4
from serverless.concurrency import ACCOUNT_REASON, RESERVED_REASON, ConcurrencyLimiter
from serverless.deploy import module_settings, spec_for
from serverless.function_params import decode_zip, resolve_name
from serverless.meters import FunctionMeter, percentile
from tests.serverless.conftest import make_zip

KNOWN = {"AKID": sigv4.Credentials("AKID", "secret")}


def _signed(url: str, body: bytes, secret: str = "secret", method: str = "POST") -> tuple[str, dict, bytes]:
    req = AWSRequest(method=method, url=url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(Credentials("AKID", secret), "lambda", "us-east-1").add_auth(req)
    p = req.prepare()
    path_qs = p.url.split("://", 1)[1].partition("/")[2]
    return "/" + path_qs, {k.lower(): v for k, v in p.headers.items()} | {"host": "127.0.0.1:9"}, body


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/2015-03-31/functions/f/invocations",
        "http://127.0.0.1:9/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A000000000000%3Afunction%3Af/invocations",
        "http://127.0.0.1:9/2015-03-31/functions/?MaxItems=2&Marker=abc%3D",
    ],
)
def test_sigv4_accepts_what_botocore_signs(url):
    path, headers, body = _signed(url, b'{"a": 1}')
    sigv4.verify("POST", path, headers, body, KNOWN)


def test_sigv4_refuses_tampering_and_strangers():
    path, headers, body = _signed("http://127.0.0.1:9/2015-03-31/functions/f/invocations", b'{"a": 1}')
    with pytest.raises(errors.LambdaError) as e:
        sigv4.verify("POST", path, headers, b'{"a": 2}', KNOWN)
    assert (e.value.code, e.value.status) == ("InvalidSignatureException", 403)
    with pytest.raises(errors.LambdaError) as e:
        sigv4.verify("POST", path, headers, body, {"OTHER": sigv4.Credentials("OTHER", "x")})
    assert e.value.code == "UnrecognizedClientException"
    with pytest.raises(errors.LambdaError) as e:
        sigv4.verify("POST", path, {k: v for k, v in headers.items() if k != "authorization"}, body, KNOWN)
    assert e.value.code == "MissingAuthenticationTokenException"
    with pytest.raises(errors.LambdaError) as e:
        sigv4.verify("POST", path, headers, body, KNOWN, now=0.0)
    assert "expired" in e.value.message


def test_concurrency_buckets():
    lim = ConcurrencyLimiter(account_limit=3, min_unreserved=1)
    lim.check_reservation("r", 2)
    with pytest.raises(errors.LambdaError):
        lim.check_reservation("r", 3)  # would leave 0 < 1 unreserved
    lim.set_reserved("r", 1)
    lease = lim.acquire("r")
    with pytest.raises(errors.LambdaError) as e:
        lim.acquire("r")
    assert e.value.extra["Reason"] == RESERVED_REASON and e.value.status == 429
    a, b = lim.acquire("x"), lim.acquire("y")  # the unreserved pool is 3 - 1 = 2
    with pytest.raises(errors.LambdaError) as e:
        lim.acquire("z")
    assert e.value.extra["Reason"] == ACCOUNT_REASON
    for held in (lease, a, b):
        lim.release(held)
    assert lim.unreserved_running == 0 and lim.running["r"] == 0


@pytest.mark.parametrize("value", [-5, -1, 1.5, True, "3"])
def test_a_reservation_that_is_not_a_count_gets_its_own_message(value):
    """-5 was answered "decreases account's UnreservedConcurrentExecution below its minimum":
    the account was blamed for a value no account accepts."""
    lim = ConcurrencyLimiter(account_limit=1000)
    with pytest.raises(errors.LambdaError) as e:
        lim.check_reservation("r", value)
    assert (e.value.code, e.value.status) == ("InvalidParameterValueException", 400)
    assert e.value.message == (f"1 validation error detected: Value '{value}' at 'reservedConcurrentExecutions' "
                               "failed to satisfy constraint: Member must have value greater than or equal to 0")
    lim.check_reservation("r", 0)  # 0 is valid: it holds the function's invocations back


def test_an_event_throttled_too_long_is_logged_and_counted_when_dropped(tmp_path):
    """After its throttle waits an Event was dropped with no log line and no counter; it is
    dropped once older than the maximum event age (AWS's 6 h; 0.3 s here)."""
    import asyncio
    from types import SimpleNamespace

    from serverless import invoke
    from serverless.meters import Meters

    rec = SimpleNamespace(name="held", state="Active", last_update_status="Successful")
    lim = ConcurrencyLimiter(account_limit=1000)
    lim.set_reserved("held", 0)  # every invocation throttles
    meters = Meters()
    store = SimpleNamespace(functions={"held": rec}, code_dir=lambda rec: tmp_path)  # its code is there
    invoker = invoke.Invoker(store, None, lim, meters, tmp_path,
                             max_event_age_s=0.3)
    asyncio.run(invoker._run_event("held", "{}", "rid-1"))
    invoker.forget("held")
    snap = meters.of("held").snapshot()
    assert snap["async_events_dropped"] == 1 and snap["throttles"] >= 2 and snap["invocations"] == 0
    log = (tmp_path / "held.log").read_text()
    assert log.startswith("EVENT RequestId: rid-1 dropped: throttled ")
    assert "past the maximum event age of 0.3 s (last: TooManyRequestsException: " in log


def test_meter_bills_by_the_millisecond():
    m = FunctionMeter()
    assert m.record(0.4, 1024, cold=True, init_ms=50.0, error=False) == 1
    assert m.record(1000.2, 2048, cold=False, init_ms=0.0, error=True) == 1001
    assert m.gb_s == pytest.approx(0.001 + 2.002)
    assert m.cost_usd == pytest.approx(2 * 0.2e-6 + 2.003 * 0.0000166667)
    snap = m.snapshot()
    assert (snap["invocations"], snap["cold_starts"], snap["errors"]) == (2, 1, 1)
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([], 99) == 0.0


def test_names_and_packages():
    assert resolve_name("my_fn-1") == "my_fn-1"
    assert resolve_name("arn:aws:lambda:us-east-1:000000000000:function:my_fn") == "my_fn"
    assert resolve_name("000000000000:function:my_fn:$LATEST") == "my_fn"
    with pytest.raises(errors.LambdaError):
        resolve_name("bad name!")
    good = make_zip({"a.py": "x = 1\n"})
    assert decode_zip(base64.b64encode(good).decode()) == good
    for bad in ("not base64!!", base64.b64encode(b"PK\x03\x04garbage").decode()):
        with pytest.raises(errors.LambdaError) as e:
            decode_zip(bad)
        assert e.value.code == "InvalidParameterValueException"


def test_deploy_spec_reads_module_settings(tmp_path):
    mod = tmp_path / "scorer.py"
    mod.write_text("LAMBDA_MEMORY_MB = 640\nLAMBDA_TIMEOUT_S = 42\ndef handler(e, c):\n    return 1\n")
    assert module_settings(mod) == {"LAMBDA_MEMORY_MB": 640, "LAMBDA_TIMEOUT_S": 42}
    spec = spec_for(mod)
    assert (spec.name, spec.handler, spec.memory_mb, spec.timeout_s) == ("roll-agentic-scorer", "scorer.handler", 640, 42)


def test_sigv4_binds_the_body_even_when_its_hash_travels_in_a_header():
    """With x-amz-content-sha256 signed, its value was trusted as the body's hash: a captured
    request replayed with another body (another payload, another function's code) verified."""
    url = "http://127.0.0.1:9/2015-03-31/functions/f/invocations"
    for declared in (hashlib.sha256(b'{"a": 1}').hexdigest(), "UNSIGNED-PAYLOAD"):
        req = AWSRequest(method="POST", url=url, data=b'{"a": 1}', headers={"X-Amz-Content-SHA256": declared})
        SigV4Auth(Credentials("AKID", "secret"), "lambda", "us-east-1").add_auth(req)
        p = req.prepare()
        headers = {k.lower(): v for k, v in p.headers.items()} | {"host": "127.0.0.1:9"}
        path = "/" + p.url.split("://", 1)[1].partition("/")[2]
        if declared != "UNSIGNED-PAYLOAD":
            sigv4.verify("POST", path, headers, b'{"a": 1}', KNOWN)
        with pytest.raises(errors.LambdaError) as e:
            sigv4.verify("POST", path, headers, b'{"a": 2}', KNOWN)
        assert (e.value.code, e.value.status) == ("InvalidSignatureException", 403)


def test_deploy_takes_a_path_or_a_module_named_as_a_tasks_reward(tmp_path, monkeypatch):
    """`serverless deploy deploy_pkg.scoring` deploys the module a task's `reward: deploy_pkg.scoring`
    runs; a path that exists is taken as given, and a name nothing matches stays as given
    (the deploy then says there is nothing to deploy there)."""
    from serverless.cli import _module_path

    (tmp_path / "deploy_pkg").mkdir()
    (tmp_path / "deploy_pkg" / "__init__.py").write_text("")
    (tmp_path / "deploy_pkg" / "scoring.py").write_text("def handler(event, context):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "deploy_pkg" or m.startswith("deploy_pkg.")]:
        monkeypatch.delitem(sys.modules, name)  # another test's package of that name
    monkeypatch.chdir(tmp_path)
    assert _module_path("deploy_pkg.scoring") == tmp_path / "deploy_pkg" / "scoring.py"
    assert _module_path("code_exec").name == "code_exec.py" and _module_path("code_exec").parent.name == "rewards"
    assert _module_path("deploy_pkg/scoring.py") == Path("deploy_pkg/scoring.py")
    assert _module_path("deploy_pkg.nothing") == Path("deploy_pkg.nothing")
    assert _module_path("not-a-module") == Path("not-a-module")


def test_imports_aws_lambdas_runtime_lacks_are_named(tmp_path):
    """They run here (the emulator's workers use this environment) and fail on AWS."""
    from serverless.deploy import missing_on_lambda, spec_for

    mod = tmp_path / "scorer.py"
    mod.write_text("import json, os.path\nimport boto3\nfrom numpy import mean\n"
                   "def handler(event, context):\n    import torch.nn as nn\n    return 1\n")
    assert missing_on_lambda(mod) == ["numpy", "torch"]
    assert spec_for(mod).missing_on_lambda == ["numpy", "torch"]
    assert missing_on_lambda(tmp_path) == []  # a folder may bring its own packages
    (tmp_path / "broken.py").write_text("def (:\n")
    assert missing_on_lambda(tmp_path / "broken.py") == []  # the deploy's own checks say what is wrong
