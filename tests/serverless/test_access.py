"""What the emulator refuses at its edge: web pages (no SDK signature, an Origin, a foreign
Host) and request bodies that are not what they claim to be.

Before, an emulator without credentials (the default) accepted any unsigned request, so a
web page open in a developer's browser could POST text/plain to the port, create a function
and invoke it: arbitrary code execution. Every request here goes to 127.0.0.1.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from serverless.access import host_header_is_loopback
from tests.serverless.conftest import client_for, create, make_zip, sdk_headers

APP = "def handler(event, context):\n    return {'event': event}\n"
CREATE = "/2015-03-31/functions"


def _request(endpoint: str, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int, str, dict]:
    """Status, x-amzn-ErrorType and JSON body of one raw request."""
    req = urllib.request.Request(endpoint + path, data=body or None, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback only
            return resp.status, "", json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("x-amzn-ErrorType", ""), json.loads(e.read() or b"{}")


def _create_body(name: str) -> bytes:
    import base64

    return json.dumps({"FunctionName": name, "Runtime": "python3.11", "Handler": "app.handler",
                       "Role": "arn:aws:iam::000000000000:role/test",
                       "Code": {"ZipFile": base64.b64encode(make_zip({"app.py": APP})).decode()}}).encode()


def _exists(endpoint: str, name: str) -> bool:
    return name in [f["FunctionName"] for f in client_for(endpoint).list_functions()["Functions"]]


def test_a_web_pages_unsigned_post_cannot_create_a_function(shared_endpoint):
    """A page's fetch/form: text/plain, no Authorization, no X-Amz-Date."""
    status, etype, body = _request(shared_endpoint, "POST", CREATE, _create_body("acc-page"),
                                   {"Content-Type": "text/plain"})
    assert (status, etype) == (403, "MissingAuthenticationTokenException") and body["message"]
    assert not _exists(shared_endpoint, "acc-page")


@pytest.mark.parametrize(("drop", "replace", "error_type"), [
    ("X-Amz-Date", {}, "IncompleteSignatureException"),
    ("", {"Authorization": "AWS4-HMAC-SHA256 junk"}, "IncompleteSignatureException"),
    ("", {"Authorization": "Bearer abc"}, "IncompleteSignatureException"),
    ("", {"X-Amz-Date": "yesterday"}, "IncompleteSignatureException"),
])
def test_a_malformed_signature_is_refused_even_without_credentials(shared_endpoint, drop, replace, error_type):
    headers = {k: v for k, v in sdk_headers().items() if k != drop} | replace
    status, etype, _ = _request(shared_endpoint, "POST", CREATE, _create_body("acc-malformed"), headers)
    assert (status, etype) == (403, error_type)
    assert not _exists(shared_endpoint, "acc-malformed")


def test_a_request_with_an_origin_is_refused_even_if_signed(shared_endpoint):
    status, etype, body = _request(shared_endpoint, "POST", CREATE, _create_body("acc-origin"),
                                   sdk_headers() | {"Origin": "https://example.com"})
    assert (status, etype) == (403, "AccessDeniedException") and "Origin" in body["message"]
    # the CORS preflight a page needs before it may send an Authorization header
    status, etype, _ = _request(shared_endpoint, "OPTIONS", CREATE, b"",
                                {"Origin": "https://example.com", "Access-Control-Request-Method": "POST"})
    assert (status, etype) == (403, "AccessDeniedException")
    assert not _exists(shared_endpoint, "acc-origin")


def test_boto3_gets_a_clear_client_error_for_a_refusal(shared_endpoint):
    c = client_for(shared_endpoint)

    def add_origin(request, **_):
        request.headers["Origin"] = "https://example.com"

    c.meta.events.register("before-send.lambda.*", add_origin)
    with pytest.raises(ClientError) as e:
        c.list_functions()
    assert e.value.response["Error"]["Code"] == "AccessDeniedException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_foreign_host_is_refused_and_loopback_names_are_not(shared_endpoint):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name, which the Host header carries."""
    port = urlsplit(shared_endpoint).port
    status, etype, body = _request(shared_endpoint, "GET", CREATE, b"", sdk_headers() | {"Host": f"evil.example:{port}"})
    assert (status, etype) == (403, "AccessDeniedException") and "loopback" in body["message"]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert _request(shared_endpoint, "GET", CREATE, b"", sdk_headers() | {"Host": host})[0] == 200, host


def test_health_stays_open_to_a_parent_waiting_for_the_port_but_not_to_pages(shared_endpoint):
    assert _request(shared_endpoint, "GET", "/_emulator/health")[0] == 200
    assert _request(shared_endpoint, "GET", "/_emulator/health", headers={"Origin": "null"})[0] == 403


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.1:9001", True), ("LOCALHOST:9001", True), ("[::1]:9001", True), ("[::1]", True),
    ("", False), ("evil.example", False), ("127.0.0.1.evil.example:9001", False), ("localhost:x", False),
    ("[::1]x", False), ("::1", False), ("10.0.0.1:9001", False), ("[::1]:", False),
])
def test_host_headers_that_count_as_loopback(host, loopback):
    assert host_header_is_loopback(host) is loopback


def test_allow_remote_accepts_any_host_but_still_no_origin(tmp_path):
    import asyncio

    from tests.serverless.conftest import in_process

    async def scenario() -> None:
        async with in_process(tmp_path, allow_remote=True) as http:
            assert (await http.get(CREATE, headers={"Host": "my-box.lan:9001"})).status == 200
            assert (await http.get(CREATE, headers={"Origin": "https://example.com"})).status == 403

    asyncio.run(scenario())


# -- bodies --------------------------------------------------------------------------------------


def test_a_body_that_is_not_the_gzip_it_claims_is_a_400_not_a_500(shared_endpoint):
    """A 500 ServiceException is retried by every client; the fault is the caller's."""
    status, etype, _ = _request(shared_endpoint, "POST", CREATE, b"not gzip at all",
                                sdk_headers() | {"Content-Encoding": "gzip"})
    assert (status, etype) == (400, "InvalidRequestContentException")


def test_a_whitespace_payload_is_refused_at_the_edge_and_gzip_still_works(shared_endpoint):
    """Whitespace alone passed the check and failed inside the function (JSONDecodeError)."""
    create(client_for(shared_endpoint), "acc-body", make_zip({"app.py": APP}), handler="app.handler")
    invoke = "/2015-03-31/functions/acc-body/invocations"
    for payload in (b"  ", b"\n\t "):
        assert _request(shared_endpoint, "POST", invoke, payload, sdk_headers())[:2] == (400, "InvalidRequestContentException")
    assert _request(shared_endpoint, "POST", invoke, b"", sdk_headers())[0] == 200  # none: the empty event
    status, _, body = _request(shared_endpoint, "POST", invoke, gzip.compress(b'{"a": 1}'),
                               sdk_headers() | {"Content-Encoding": "gzip"})
    assert (status, body) == (200, {"event": {"a": 1}})
