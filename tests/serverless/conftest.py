"""Fixtures: emulators on free loopback ports (stopped at teardown) and zipped test functions."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import textwrap
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from roll_agentic.reward.service import LocalServerless
from serverless.deploy import lambda_client

FUNCTIONS = {
    "echo.py": '''
        import json, os, time

        def handler(event, context):
            print("echo", json.dumps(event))
            if event.get("fail"):
                raise ValueError("asked to fail")
            if event.get("sleep"):
                time.sleep(event["sleep"])
            if event.get("allocate_mb"):
                block = bytearray(event["allocate_mb"] * 1024 * 1024)
                block[::4096] = b"x" * len(block[::4096])
            if event.get("count_to"):
                with open(event["count_to"], "a") as f:
                    f.write("x")
                if event.get("fail_after_count"):
                    raise RuntimeError("counted, now failing")
            return {"reward": event.get("reward", 1.0), "pid": os.getpid(),
                    "env": os.environ.get("GREETING"), "function": context.function_name,
                    "remaining_ms": context.get_remaining_time_in_millis()}
        ''',
}


def make_zip(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, src in files.items():
            zf.writestr(name, textwrap.dedent(src))
    return buf.getvalue()


@pytest.fixture
def echo_zip() -> bytes:
    return make_zip({"echo.py": FUNCTIONS["echo.py"]})


@pytest.fixture
def start_emulator() -> Iterator[Callable[..., str]]:
    """Starts an emulator (`start_emulator(state_dir, *extra_args)` -> endpoint URL); all are stopped at the end."""
    started: list[LocalServerless] = []

    def start(state_dir: Path, *extra: str, keep_alive_s: float = 600.0, account_concurrency: int = 1000) -> str:
        svc = LocalServerless(keep_alive_s=keep_alive_s, account_concurrency=account_concurrency,
                              extra_args=("--event-retry-delay", "0.05", *extra))
        started.append(svc)
        return svc.start(state_dir)

    start.services = started  # type: ignore[attr-defined]
    yield start
    for svc in started:
        svc.stop()


@pytest.fixture(scope="module")
def shared_endpoint(tmp_path_factory) -> Iterator[str]:
    """One emulator for the tests of a module that do not need their own."""
    svc = LocalServerless(extra_args=("--event-retry-delay", "0.05"))
    url = svc.start(tmp_path_factory.mktemp("shared-emulator"))
    yield url
    svc.stop()


def sdk_headers() -> dict[str, str]:
    """What every SDK request carries and an emulator without credentials still asks for: a
    well-formed SigV4 Authorization header (any key, any signature) and X-Amz-Date."""
    return {
        "Authorization": "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/lambda/aws4_request, "
                         "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
        "X-Amz-Date": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
    }


def client_for(endpoint: str, **kw):
    return lambda_client(endpoint, **kw)


def create(client, name: str, zip_bytes: bytes, handler: str = "echo.handler", **kw) -> dict:
    client.create_function(FunctionName=name, Runtime="python3.11", Role="arn:aws:iam::000000000000:role/test",
                           Handler=handler, Code={"ZipFile": zip_bytes}, **kw)
    client.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    return client.get_function_configuration(FunctionName=name)


@contextlib.asynccontextmanager
async def in_process(state_dir: Path, **cfg) -> AsyncIterator:
    """An emulator in this process (its internals reachable, as `http.emulator`) behind an
    aiohttp test client on 127.0.0.1 that sends what an SDK sends; closed at the end."""
    from aiohttp.test_utils import TestClient, TestServer

    from serverless.server import Emulator, ServerConfig

    emulator = Emulator(ServerConfig(state_dir=state_dir, **{"transition_s": 0.01, **cfg}))
    async with TestClient(TestServer(emulator.app(), host="127.0.0.1"), headers=sdk_headers()) as http:
        http.emulator = emulator  # type: ignore[attr-defined]
        try:
            yield http
        finally:
            await emulator.close()


async def create_in_process(http, name: str, zip_bytes: bytes, handler: str, **kw) -> None:
    """CreateFunction through `http` (from `in_process`), then waits until it is Active."""
    body = {"FunctionName": name, "Handler": handler, "Runtime": "python3.11",
            "Code": {"ZipFile": base64.b64encode(zip_bytes).decode()}, **kw}
    resp = await http.post("/2015-03-31/functions", json=body)
    assert resp.status == 201, await resp.text()
    while (await (await http.get(f"/2015-03-31/functions/{name}/configuration")).json())["State"] != "Active":
        await asyncio.sleep(0.02)
