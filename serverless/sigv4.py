"""Checks AWS Signature Version 4 on incoming requests, the way Lambda would.

With credentials given to the emulator, a request signed with an unknown
access key is answered 403 UnrecognizedClientException and a request whose
signature does not verify 403 InvalidSignatureException, both in AWS's error
shape. Without them (`check_form`) any key and signature are accepted, but a
request must still carry a well-formed SigV4 Authorization header and
X-Amz-Date, as every SDK sends them: a web page cannot (a browser sends a
custom Authorization header only after a CORS preflight, which the server
refuses), so it cannot drive the emulator from a developer's browser. The canonical request is rebuilt exactly as botocore's
`SigV4Auth` builds it (the path quoted once more, query pairs sorted, the
headers named in SignedHeaders trimmed and lower-cased, the body's SHA-256).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from calendar import timegm
from dataclasses import dataclass
from urllib.parse import quote

from serverless import errors

AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request,\s*"
    r"SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$"
)
MAX_SKEW_S = 15 * 60  # AWS refuses a request signed more than 15 minutes away


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _canonical_path(raw_path: str) -> str:
    segments: list[str] = []
    for seg in raw_path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if segments:
                segments.pop()
            continue
        segments.append(seg)
    path = "/" + "/".join(segments)
    if raw_path.endswith("/") and path != "/":
        path += "/"
    return quote(path, safe="/~")


def _canonical_query(query: str) -> str:
    if not query:
        return ""
    pairs = [pair.partition("=")[::2] for pair in query.split("&")]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def _parsed(headers: dict[str, str]) -> tuple[re.Match[str], str, int]:
    """The Authorization header's parts, the X-Amz-Date and its epoch seconds; a 403
    LambdaError if either header is missing or malformed."""
    auth = headers.get("authorization", "")
    m = AUTH_RE.match(auth.strip())
    if not m:
        raise errors.access_denied(
            "MissingAuthenticationTokenException" if not auth else "IncompleteSignatureException",
            "Missing Authentication Token" if not auth
            else "Authorization header requires AWS4-HMAC-SHA256 Credential, SignedHeaders and Signature.",
        )
    stamp = headers.get("x-amz-date", "")
    try:
        t = timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise errors.access_denied("IncompleteSignatureException", "X-Amz-Date is missing or malformed.") from None
    return m, stamp, t


def check_form(headers: dict[str, str]) -> None:
    """Raises a 403 LambdaError unless the request carries a well-formed SigV4 Authorization
    header and X-Amz-Date (any key, any signature): what an emulator without credentials asks."""
    _parsed(headers)


def verify(
    method: str,
    raw_path_qs: str,
    headers: dict[str, str],
    body: bytes,
    known: dict[str, Credentials],
    now: float | None = None,
) -> None:
    """Raises a 403 LambdaError unless the request is signed by one of `known`.

    `headers` must map lower-cased names to values; `raw_path_qs` is the path and
    query string exactly as they arrived (still percent-encoded).
    """
    m, stamp, t = _parsed(headers)
    access_key, day, region, service, signed, signature = m.groups()
    cred = known.get(access_key)
    if cred is None:
        raise errors.access_denied(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if abs((now if now is not None else time.time()) - t) > MAX_SKEW_S:
        raise errors.access_denied("InvalidSignatureException", f"Signature expired: {stamp} is now earlier or later than 15 minutes from the current time.")
    path, _, query = raw_path_qs.partition("?")
    names = signed.split(";")
    canonical_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
    payload_hash = hashlib.sha256(body).hexdigest()
    declared = headers.get("x-amz-content-sha256")
    # The signature covers this header's value, not the body: trusted as the body's hash, it let
    # a captured request be replayed with any other body (UNSIGNED-PAYLOAD is S3's, not Lambda's).
    if declared is not None and declared != payload_hash:
        raise errors.access_denied(
            "InvalidSignatureException",
            "The provided 'x-amz-content-sha256' header does not match the SHA-256 of the request body.",
        )
    canonical = "\n".join(
        [method.upper(), _canonical_path(path), _canonical_query(query), canonical_headers, signed, payload_hash]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(_sign(_sign(_sign(f"AWS4{cred.secret_key}".encode(), day), region), service), "aws4_request")
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise errors.access_denied(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method.",
        )
