"""Who may call the emulator: SDKs on this machine, never web pages.

The emulator runs any code it is sent (CreateFunction, then Invoke), so a
request that a web page open in a developer's browser could make must be
refused: with no credentials configured (the default) such a page could
POST `text/plain` to the port and execute code. Checked before any route:

- an `Origin` header: no SDK sends one; every browser fetch and form POST
  does (and a CORS preflight, which a page needs before it may send any
  custom header, is refused with it);
- a `Host` that is not loopback, unless the server allows remote callers: a
  DNS-rebinding page reaches 127.0.0.1 under its own host name;
- no well-formed SigV4 `Authorization` header and `X-Amz-Date`, on every
  route but /_emulator/health: boto3 always sends them, a page cannot without
  a preflight. With credentials configured the signature is verified
  (sigv4.verify); without them any key and signature are accepted.

Each refusal is a 403 in AWS's error shape, which boto3 raises as a ClientError.
"""

from __future__ import annotations

import ipaddress

from aiohttp import web

from serverless import errors, sigv4

OPEN_PATHS = frozenset({"/_emulator/health"})  # a parent waits on it for the port; it reveals nothing else


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_header_is_loopback(value: str) -> bool:
    """Whether a Host header names a loopback address (127.0.0.1, localhost, [::1]; any port)."""
    value = value.strip().lower()
    if value.startswith("["):  # [v6] or [v6]:port
        host, sep, rest = value[1:].partition("]")
        port_ok = bool(sep) and (not rest or (rest[:1] == ":" and rest[1:].isdigit()))
    else:
        host, sep, port = value.partition(":")
        port_ok = not sep or port.isdigit()
    return port_ok and is_loopback(host)


def check_caller(headers: dict[str, str], allow_remote: bool) -> None:
    """Refuses a request from a web page (`headers`: lower-cased names): a 403 LambdaError."""
    if "origin" in headers:
        raise errors.access_denied(
            "AccessDeniedException",
            "Requests with an Origin header (from a web page) are refused: the emulator runs any code it is sent.",
        )
    host = headers.get("host", "")
    if not allow_remote and not host_header_is_loopback(host):
        raise errors.access_denied(
            "AccessDeniedException",
            f"Host {host!r} is not a loopback address: call the emulator at 127.0.0.1, localhost or [::1] "
            "(or start it with --allow-remote)",
        )


async def authorize(request: web.Request, credentials: dict[str, sigv4.Credentials], allow_remote: bool) -> None:
    """All of the module's checks on one request; raises a 403 LambdaError."""
    headers = {k.lower(): v for k, v in request.headers.items()}
    check_caller(headers, allow_remote)
    if request.path in OPEN_PATHS:
        return
    if credentials:
        body = await request.read()  # aiohttp keeps it: the handler reads it again
        sigv4.verify(request.method, request.raw_path, headers, body, credentials)
    else:
        sigv4.check_form(headers)
