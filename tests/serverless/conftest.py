"""Fixtures: emulators on free loopback ports (stopped at teardown) and zipped test functions."""

from __future__ import annotations

import io
import textwrap
import zipfile
from collections.abc import Callable, Iterator
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


def client_for(endpoint: str, **kw):
    return lambda_client(endpoint, **kw)


def create(client, name: str, zip_bytes: bytes, handler: str = "echo.handler", **kw) -> dict:
    client.create_function(FunctionName=name, Runtime="python3.11", Role="arn:aws:iam::000000000000:role/test",
                           Handler=handler, Code={"ZipFile": zip_bytes}, **kw)
    client.get_waiter("function_active_v2").wait(FunctionName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    return client.get_function_configuration(FunctionName=name)
