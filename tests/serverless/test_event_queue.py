"""Event invocations of a throttled function: they wait without holding up the others' events,
and are dropped by age (AWS's maximum event age), logged and counted."""

from __future__ import annotations

import json
import time

from serverless.cli import emulator_call
from tests.serverless.conftest import client_for, create

SLOTS = 64  # Invoker's max_events_in_flight


def test_a_throttled_functions_events_do_not_stall_another_functions(start_emulator, tmp_path, echo_zip):
    """Each throttled event held one of the 64 slots through its waits (~390 s): 64 of them
    stopped every other function's events for minutes."""
    url = start_emulator(tmp_path / "state")
    c = client_for(url)
    create(c, "evq-held", echo_zip)
    create(c, "evq-free", echo_zip)
    c.put_function_concurrency(FunctionName="evq-held", ReservedConcurrentExecutions=0)  # every call throttles
    for _ in range(SLOTS + 6):
        assert c.invoke(FunctionName="evq-held", InvocationType="Event", Payload=b"{}")["StatusCode"] == 202
    done = tmp_path / "free-ran"
    c.invoke(FunctionName="evq-free", InvocationType="Event", Payload=json.dumps({"count_to": str(done)}).encode())
    deadline = time.monotonic() + 60  # generous: what is asserted is that it runs at all
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists(), "the free function's event never ran behind the throttled ones"


def test_a_throttled_event_is_dropped_by_age_with_a_log_line_and_a_count(start_emulator, tmp_path, echo_zip):
    url = start_emulator(tmp_path / "state", "--max-event-age", "0.5")
    c = client_for(url)
    create(c, "evq-old", echo_zip)
    c.put_function_concurrency(FunctionName="evq-old", ReservedConcurrentExecutions=0)
    rid = c.invoke(FunctionName="evq-old", InvocationType="Event", Payload=b"{}")["ResponseMetadata"]["RequestId"]

    def dropped() -> int:
        return json.loads(emulator_call(url, "GET", "/_emulator/stats"))["functions"]["evq-old"]["async_events_dropped"]

    deadline = time.monotonic() + 60
    while dropped() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert dropped() == 1
    log = emulator_call(url, "GET", "/_emulator/logs/evq-old").decode()
    assert f"EVENT RequestId: {rid} dropped: throttled " in log and "past the maximum event age of 0.5 s" in log


def test_an_event_retried_during_a_code_update_waits_for_the_new_code(start_emulator, tmp_path):
    """UpdateFunctionCode left the function Active on code unpacked only a transition later: a retry
    in that gap started a worker in a folder not there yet (FileNotFoundError), spent its attempts
    and the event was lost. It waits for the new code instead, spending no attempt."""
    from tests.serverless.conftest import make_zip

    old = make_zip({"app.py": '''
        import time

        def handler(event, context):
            with open(event["mark"], "a") as f:
                f.write("o")
            time.sleep(1.0)
            raise RuntimeError("the old code fails: the event is retried")
        '''})
    new = make_zip({"app.py": '''
        def handler(event, context):
            with open(event["mark"], "a") as f:
                f.write("n")
            return {"reward": 1.0}
        '''})
    url = start_emulator(tmp_path / "state", "--state-transition-delay", "3")
    c = client_for(url)
    create(c, "evq-update", old, handler="app.handler")
    mark = tmp_path / "mark"
    c.invoke(FunctionName="evq-update", InvocationType="Event", Payload=json.dumps({"mark": str(mark)}).encode())
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mark.exists(), "the old code never ran"
    c.update_function_code(FunctionName="evq-update", ZipFile=new)  # the retry comes within the 3 s transition
    deadline = time.monotonic() + 60
    while "n" not in mark.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = emulator_call(url, "GET", "/_emulator/logs/evq-update").decode()
    assert mark.read_text() == "on", log
    assert "could not run" not in log
