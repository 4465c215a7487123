"""What an execution environment runs on and leaves behind: updates while it is busy,
its child processes, request ids, memory figures and a corrupt state directory."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from serverless.cli import emulator_call
from tests.serverless.conftest import client_for, create, make_zip

SLOW = """
import os, subprocess, time

def handler(event, context):
    if event.get("child_pid_to"):
        child = subprocess.Popen(["sleep", "987"])
        with open(event["child_pid_to"], "w") as f:
            f.write(str(child.pid))
    time.sleep(event.get("sleep", 0))
    if event.get("late_import"):
        import helper  # resolved from the code directory only now
        return {"helper": helper.VALUE}
    return {"greeting": os.environ.get("GREETING"), "request_id": context.aws_request_id}
"""


def _in_background(fn):
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn()))
    t.start()
    return t, out


def _payload(resp) -> dict:
    return json.loads(resp["Payload"].read())


def test_an_environment_busy_during_a_configuration_update_serves_no_later_call(shared_endpoint):
    """Before, it went back to the idle pool and answered with the old variables."""
    c = client_for(shared_endpoint)
    create(c, "sbx-config", make_zip({"app.py": SLOW}), handler="app.handler",
           Environment={"Variables": {"GREETING": "old"}})
    t, out = _in_background(lambda: _payload(c.invoke(FunctionName="sbx-config", Payload=b'{"sleep": 1.5}')))
    time.sleep(0.5)
    c.update_function_configuration(FunctionName="sbx-config", Environment={"Variables": {"GREETING": "new"}})
    c.get_waiter("function_updated_v2").wait(FunctionName="sbx-config", WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    t.join()
    assert out["r"]["greeting"] == "old"  # it finishes on what it started with
    for _ in range(3):
        assert _payload(c.invoke(FunctionName="sbx-config", Payload=b"{}"))["greeting"] == "new"


def test_an_update_keeps_the_code_a_running_call_still_imports_from(shared_endpoint):
    c = client_for(shared_endpoint)
    code = {"app.py": SLOW, "helper.py": "VALUE = 1\n"}
    create(c, "sbx-code", make_zip(code), handler="app.handler")
    t, out = _in_background(lambda: c.invoke(FunctionName="sbx-code", Payload=b'{"sleep": 1.0, "late_import": true}'))
    time.sleep(0.4)
    c.update_function_code(FunctionName="sbx-code", ZipFile=make_zip({**code, "helper.py": "VALUE = 2\n"}))
    c.get_waiter("function_updated_v2").wait(FunctionName="sbx-code", WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    t.join()
    assert "FunctionError" not in out["r"] and _payload(out["r"]) == {"helper": 1}
    again = c.invoke(FunctionName="sbx-code", Payload=b'{"late_import": true}')
    assert _payload(again) == {"helper": 2}


def test_a_timeout_kills_what_the_handler_started(shared_endpoint, tmp_path):
    c = client_for(shared_endpoint)
    create(c, "sbx-children", make_zip({"app.py": SLOW}), handler="app.handler", Timeout=1)
    pid_file = tmp_path / "child.pid"
    resp = c.invoke(FunctionName="sbx-children", Payload=json.dumps({"child_pid_to": str(pid_file), "sleep": 30}).encode())
    assert resp["FunctionError"] == "Unhandled" and _payload(resp)["errorType"] == "Sandbox.Timedout"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().split()[2] == "Z", "the handler's child outlived its timeout"


def test_an_event_runs_under_the_request_id_it_was_given(shared_endpoint):
    c = client_for(shared_endpoint)
    create(c, "sbx-event", make_zip({"app.py": SLOW}), handler="app.handler")
    rid = c.invoke(FunctionName="sbx-event", InvocationType="Event", Payload=b"{}")["ResponseMetadata"]["RequestId"]
    deadline = time.monotonic() + 10
    log = ""
    while f"END RequestId: {rid}" not in log and time.monotonic() < deadline:
        time.sleep(0.05)
        log = emulator_call(shared_endpoint, "GET", "/_emulator/logs/sbx-event?lines=20").decode()
    assert f"START RequestId: {rid}" in log and f"END RequestId: {rid}" in log


def test_max_memory_used_is_the_functions_own():
    """A worker started by a big process reported that process's peak (ru_maxrss survives exec)."""
    parent = (
        "import subprocess, sys\n"
        "block = bytearray(400 << 20); block[::4096] = b'x' * len(block[::4096])\n"
        "print(subprocess.run([sys.executable, '-c', 'from serverless.worker import _peak_resident_mb;"
        " print(_peak_resident_mb())'], capture_output=True, text=True, check=True).stdout)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert 0 < int(out.stdout) < 200, out.stdout


def test_a_corrupt_function_on_disk_does_not_stop_the_emulator(start_emulator, tmp_path, echo_zip):
    state = tmp_path / "state"
    url = start_emulator(state)
    c = client_for(url)
    create(c, "sbx-good", echo_zip)
    create(c, "sbx-bad", echo_zip)
    start_emulator.services[0].stop()
    bad = state / "functions" / "sbx-bad"
    for code_dir in bad.glob("code-*"):
        subprocess.run(["rm", "-rf", str(code_dir)], check=True)
    (bad / "code.zip").write_bytes(b"not a zip")
    url = start_emulator(state)
    c = client_for(url)
    assert [f["FunctionName"] for f in c.list_functions()["Functions"]] == ["sbx-good"]
    resp = c.invoke(FunctionName="sbx-good", Payload=b'{"reward": 0.5}', LogType="Tail")
    assert _payload(resp)["reward"] == 0.5
    assert "Max Memory Used" in base64.b64decode(resp["LogResult"]).decode()


STDIN_READER = """
import subprocess, sys

def handler(event, context):
    if event.get("child"):  # a program the function runs, reading its (inherited) stdin
        out = subprocess.run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
                             capture_output=True, text=True, timeout=context.get_remaining_time_in_millis() / 1000)
        return {"child_read": out.stdout.strip()}
    return {"read": sys.stdin.read()}
"""


def test_a_function_and_its_children_read_eof_from_stdin(shared_endpoint):
    """stdin was the request pipe: a child reading it blocked until the function's timeout
    (or, run in the background, swallowed the next request); Lambda gives them EOF."""
    c = client_for(shared_endpoint)
    create(c, "sandbox-stdin", make_zip({"reader.py": STDIN_READER}), handler="reader.handler", Timeout=5)
    assert _payload(c.invoke(FunctionName="sandbox-stdin", Payload=b'{"child": true}')) == {"child_read": "''"}
    assert _payload(c.invoke(FunctionName="sandbox-stdin", Payload=b"{}")) == {"read": ""}
    assert _payload(c.invoke(FunctionName="sandbox-stdin", Payload=b'{"child": true}')) == {"child_read": "''"}


def test_output_utf8_cannot_encode_fails_neither_the_invocation_nor_its_log(shared_endpoint):
    """A lone surrogate printed by the handler made writing the log raise: a 500
    ServiceException, which callers retry, so the function ran again."""
    c = client_for(shared_endpoint)
    src = "def handler(event, context):\n    print('half a pair: \\ud800')\n    return {'reward': 1.0}\n"
    create(c, "sandbox-surrogate", make_zip({"half.py": src}), handler="half.handler")
    resp = c.invoke(FunctionName="sandbox-surrogate", Payload=b"{}", LogType="Tail")
    assert "FunctionError" not in resp and _payload(resp) == {"reward": 1.0}
    assert "half a pair: ?" in base64.b64decode(resp["LogResult"]).decode()
    assert "half a pair: ?" in emulator_call(shared_endpoint, "GET", "/_emulator/logs/sandbox-surrogate").decode()


def test_the_handlers_stdout_is_a_stream_a_child_process_can_be_given(shared_endpoint):
    """sys.stdout was a bare StringIO: `subprocess.run(cmd, stdout=sys.stdout)` failed with
    UnsupportedOperation: fileno (it works on Lambda) and sys.stdout.encoding was None."""
    c = client_for(shared_endpoint)
    src = ("import subprocess, sys\n\ndef handler(event, context):\n"
           "    done = subprocess.run([sys.executable, '-c', 'print(\"said by a child\")'], stdout=sys.stdout)\n"
           "    return {'rc': done.returncode, 'encoding': sys.stdout.encoding}\n")
    create(c, "sandbox-stdout-fd", make_zip({"child.py": src}), handler="child.handler")
    resp = c.invoke(FunctionName="sandbox-stdout-fd", Payload=b"{}")
    assert "FunctionError" not in resp and _payload(resp) == {"rc": 0, "encoding": "utf-8"}
    assert "said by a child" in emulator_call(shared_endpoint, "GET", "/_emulator/logs/sandbox-stdout-fd").decode()
