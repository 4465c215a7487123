"""Concurrency, throttling, keep-alive, persistence, signatures and meters, through boto3."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time

import pytest
from botocore.exceptions import ClientError

from serverless.cli import emulator_call
from serverless.meters import PRICE_PER_GB_S, PRICE_PER_REQUEST
from tests.serverless.conftest import client_for, create, sdk_headers


def _in_background(fn):
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn()))
    t.start()
    return t, out


def test_reserved_concurrency_throttles_with_reason(shared_endpoint, echo_zip):
    c = client_for(shared_endpoint)
    create(c, "lim-reserved", echo_zip)
    c.put_function_concurrency(FunctionName="lim-reserved", ReservedConcurrentExecutions=1)
    assert c.get_function_concurrency(FunctionName="lim-reserved")["ReservedConcurrentExecutions"] == 1
    assert c.get_function(FunctionName="lim-reserved")["Concurrency"]["ReservedConcurrentExecutions"] == 1
    c.invoke(FunctionName="lim-reserved", Payload=b"{}")  # warm it, so the next one runs at once
    t, out = _in_background(lambda: c.invoke(FunctionName="lim-reserved", Payload=b'{"sleep": 1.0}'))
    time.sleep(0.3)
    with pytest.raises(c.exceptions.TooManyRequestsException) as e:
        c.invoke(FunctionName="lim-reserved", Payload=b"{}")
    assert e.value.response["Reason"] == "ReservedFunctionConcurrentInvocationLimitExceeded"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429
    t.join()
    assert "FunctionError" not in out["r"]
    c.delete_function_concurrency(FunctionName="lim-reserved")
    assert "ReservedConcurrentExecutions" not in c.get_function_concurrency(FunctionName="lim-reserved")
    c.put_function_concurrency(FunctionName="lim-reserved", ReservedConcurrentExecutions=0)
    with pytest.raises(c.exceptions.TooManyRequestsException):
        c.invoke(FunctionName="lim-reserved", Payload=b"{}")
    stats = json.loads(emulator_call(shared_endpoint, "GET", "/_emulator/stats"))["functions"]["lim-reserved"]
    assert stats["throttles"] == 2


def test_account_limit_keep_alive_and_meters(start_emulator, tmp_path, echo_zip):
    url = start_emulator(tmp_path / "state", keep_alive_s=0.6, account_concurrency=2)
    c = client_for(url)
    create(c, "acct-a", echo_zip, MemorySize=512)
    create(c, "acct-b", echo_zip)
    with pytest.raises(c.exceptions.InvalidParameterValueException):
        c.put_function_concurrency(FunctionName="acct-a", ReservedConcurrentExecutions=3)
    runs = [_in_background(lambda: c.invoke(FunctionName="acct-a", Payload=b'{"sleep": 1.2}')) for _ in range(2)]
    time.sleep(0.6)
    with pytest.raises(c.exceptions.TooManyRequestsException) as e:
        c.invoke(FunctionName="acct-b", Payload=b"{}")
    assert e.value.response["Reason"] == "ConcurrentInvocationLimitExceeded"
    for t, _ in runs:
        t.join()
    first = c.invoke(FunctionName="acct-b", Payload=b"{}", LogType="Tail")
    warm = c.invoke(FunctionName="acct-b", Payload=b"{}", LogType="Tail")
    assert "Init Duration" in base64.b64decode(first["LogResult"]).decode()
    assert "Init Duration" not in base64.b64decode(warm["LogResult"]).decode()
    time.sleep(1.8)  # past the keep-alive: the environment is gone
    again = c.invoke(FunctionName="acct-b", Payload=b"{}", LogType="Tail")
    assert "Init Duration" in base64.b64decode(again["LogResult"]).decode()

    stats = json.loads(emulator_call(url, "GET", "/_emulator/stats"))["functions"]
    a, b = stats["acct-a"], stats["acct-b"]
    assert (b["invocations"], b["cold_starts"], b["throttles"], b["errors"]) == (3, 2, 1, 0)
    assert (a["invocations"], a["cold_starts"]) == (2, 2)
    assert a["duration_ms_p50"] >= 1000 and a["duration_ms_p99"] >= a["duration_ms_p50"]
    assert a["gb_s"] == pytest.approx(a["billed_ms"] / 1000 * 0.5, rel=1e-4)
    assert a["cost_usd"] == pytest.approx(2 * PRICE_PER_REQUEST + a["gb_s"] * PRICE_PER_GB_S, rel=1e-3)


def test_functions_survive_a_restart(start_emulator, tmp_path, echo_zip):
    state = tmp_path / "state"
    url = start_emulator(state)
    c = client_for(url)
    create(c, "persist-me", echo_zip, Timeout=7, Environment={"Variables": {"GREETING": "again"}})
    c.put_function_concurrency(FunctionName="persist-me", ReservedConcurrentExecutions=5)
    sha = c.get_function(FunctionName="persist-me")["Configuration"]["CodeSha256"]
    start_emulator.services[-1].stop()
    url2 = start_emulator(state)
    c2 = client_for(url2)
    cfg = c2.get_function(FunctionName="persist-me")
    assert cfg["Configuration"]["CodeSha256"] == sha and cfg["Configuration"]["Timeout"] == 7
    assert cfg["Concurrency"]["ReservedConcurrentExecutions"] == 5
    assert json.loads(c2.invoke(FunctionName="persist-me", Payload=b"{}")["Payload"].read())["env"] == "again"


def test_bad_signatures_are_refused(start_emulator, tmp_path, echo_zip):
    url = start_emulator(tmp_path / "state", "--access-key", "AKIDTEST", "--secret-key", "s3cret")
    good = client_for(url, access_key="AKIDTEST", secret_key="s3cret")
    create(good, "signed", echo_zip)
    assert good.invoke(FunctionName="signed", Payload=b"{}")["StatusCode"] == 200
    assert len(good.list_functions(MaxItems=5)["Functions"]) == 1
    with pytest.raises(ClientError) as e:
        client_for(url, access_key="AKIDTEST", secret_key="wrong").invoke(FunctionName="signed", Payload=b"{}")
    assert e.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as e:
        client_for(url, access_key="AKIDOTHER", secret_key="s3cret").get_function(FunctionName="signed")
    assert e.value.response["Error"]["Code"] == "UnrecognizedClientException"
    assert json.loads(emulator_call(url, "GET", "/_emulator/stats", access_key="AKIDTEST", secret_key="s3cret"))


@pytest.mark.slow
def test_cli_list_invoke_logs(start_emulator, tmp_path):
    state = tmp_path / "state"
    start_emulator(state)
    mod = tmp_path / "tiny.py"
    mod.write_text("def handler(event, context):\n    print('tiny says hi')\n    return {'reward': 0.25}\n")
    cli = [sys.executable, "-m", "serverless.cli"]

    def run(*args):
        return subprocess.run([*cli, *args, "--state-dir", str(state)], capture_output=True, text=True, timeout=60)

    dep = run("deploy", str(mod), "--name", "tiny")
    assert dep.returncode == 0, dep.stderr
    assert "Active" in dep.stdout
    inv = run("invoke", "tiny", "--payload", "{}", "--log")
    assert inv.returncode == 0 and json.loads(inv.stdout) == {"reward": 0.25}
    assert "REPORT RequestId" in inv.stderr
    # What the service refuses ends the command in one line that names it, not a traceback.
    missing = run("invoke", "absent", "--payload", "{}")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("invoke: ResourceNotFoundException")
    bad = run("invoke", "tiny", "--payload", "{not json")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("invoke: InvalidRequestContentException")
    nothing = run("deploy", str(tmp_path / "absent.py"))
    assert nothing.returncode == 1 and nothing.stderr.startswith("deploy: nothing to deploy at")
    listed = run("list")
    assert "tiny" in listed.stdout and "cost" in listed.stdout
    row = next(ln for ln in listed.stdout.splitlines() if ln.startswith("tiny"))
    assert row.split()[3] == "1"  # invocations
    logs = run("logs", "tiny")
    assert "tiny says hi" in logs.stdout
    no_logs = run("logs", "absent")
    assert no_logs.returncode == 1 and no_logs.stderr.startswith("logs: ResourceNotFoundException")
    assert run("stop").returncode == 0


def test_refuses_a_non_loopback_host(tmp_path):
    res = subprocess.run([sys.executable, "-m", "serverless.cli", "start", "--host", "0.0.0.0", "--port", "0",
                          "--state-dir", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert res.returncode != 0 and "refusing to listen on 0.0.0.0" in res.stderr


def test_event_queue_is_bounded(start_emulator, tmp_path, echo_zip):
    """A flood of Events is refused with a 429 once the queue is full, not held until memory runs out."""
    url = start_emulator(tmp_path / "state", "--max-event-backlog", "2", "--max-event-backlog-mb", "1")
    c = client_for(url)
    create(c, "lim-events", echo_zip)
    slow = json.dumps({"sleep": 1.5, "count_to": str(tmp_path / "ran")}).encode()
    for _ in range(2):
        assert c.invoke(FunctionName="lim-events", InvocationType="Event", Payload=slow)["StatusCode"] == 202
    with pytest.raises(c.exceptions.TooManyRequestsException) as e:
        c.invoke(FunctionName="lim-events", InvocationType="Event", Payload=b"{}")
    assert e.value.response["Reason"] == "EventQueueFull"
    assert "--max-event-backlog" in e.value.response["Error"]["Message"]
    # The byte limit holds on its own: one payload larger than what is left is refused too.
    deadline = time.time() + 15
    while time.time() < deadline and len((tmp_path / "ran").read_text() if (tmp_path / "ran").exists() else "") < 2:
        time.sleep(0.05)
    time.sleep(1.7)  # both have run: the queue is empty again
    # It sleeps too: still queued or running when the next one comes, whatever the machine's speed.
    big = json.dumps({"sleep": 3.0, "pad": "x" * (1024 * 1024 - 100)}).encode()
    assert c.invoke(FunctionName="lim-events", InvocationType="Event", Payload=big)["StatusCode"] == 202
    with pytest.raises(c.exceptions.TooManyRequestsException):
        c.invoke(FunctionName="lim-events", InvocationType="Event", Payload=big)


def test_start_refuses_nonsense_settings(tmp_path):
    """Each bad flag is one line naming it, before anything starts (port 70000 used to listen on 4464)."""
    for flag, value, says in [
        ("--port", "70000", "must be a TCP port"),
        ("--account-concurrency", "0", "must be at least 1"),
        ("--keep-alive", "-5", "must be a number >= 0"),
        ("--max-event-backlog", "0", "must be at least 1"),
    ]:
        res = subprocess.run([sys.executable, "-m", "serverless.cli", "start", "--state-dir", str(tmp_path), flag, value],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 2 and f"argument {flag}: {says}" in res.stderr, res.stderr


def test_a_function_deleted_while_its_code_unpacks_stays_deleted(tmp_path, echo_zip):
    """The unpacking of a just-created function, done after its DeleteFunction, wrote its
    directory and config.json back: it came back at the next start, its code left on disk."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from serverless.functions import FunctionStore
    from serverless.server import Emulator, ServerConfig

    async def scenario() -> None:
        emulator = Emulator(ServerConfig(state_dir=tmp_path))
        reached, gate = threading.Event(), threading.Event()
        unpack = emulator.store._unpack

        def held_unpack(rec, data: bytes) -> None:  # a large package, its zip read, still unpacking
            reached.set()
            gate.wait(30)
            unpack(rec, data)

        emulator.store._unpack = held_unpack
        async with TestClient(TestServer(emulator.app(), host="127.0.0.1"), headers=sdk_headers()) as http:
            body = {"FunctionName": "deleted-early", "Handler": "echo.handler", "Runtime": "python3.11",
                    "Code": {"ZipFile": base64.b64encode(echo_zip).decode()}}
            assert (await http.post("/2015-03-31/functions", json=body)).status == 201
            assert await asyncio.to_thread(reached.wait, 30)
            delete = asyncio.ensure_future(http.delete("/2015-03-31/functions/deleted-early"))
            await asyncio.wait({delete}, timeout=0.5)  # lets the delete reach the server first
            gate.set()
            assert (await delete).status in (200, 204)
            await emulator.close()  # waits for any unpacking still under way
        assert not (tmp_path / "functions" / "deleted-early").exists()
        assert FunctionStore(tmp_path, "us-east-1").functions == {}  # what the next start loads

    asyncio.run(scenario())
