"""An invocation's time and its worker's replies: a cold start's time limit as AWS's, and a
malformed reply that stops the environment instead of putting it back out of step."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from botocore.exceptions import ClientError

from serverless import environments
from serverless.environments import INIT_LIMIT_S, MIN_HANDLER_S, handler_timeout_s
from tests.serverless.conftest import client_for, create, create_in_process, in_process, make_zip

SLOW_INIT = """
import os, time

if not os.path.exists(os.environ["MARK"]):  # the first init only: past the (lowered) init limit
    open(os.environ["MARK"], "w").close()
    time.sleep(1.5)

def handler(event, context):
    time.sleep(1.0)
    return {"remaining_ms": context.get_remaining_time_in_millis()}
"""

GARBLES = """
import gc, io, os

def handler(event, context):
    if event.get("garble"):
        # A frame that is not JSON ahead of the real reply, on the worker's reply stream (the
        # one binary writer it holds on a socket or pipe): what a corrupted worker would send.
        for obj in gc.get_objects():
            if isinstance(obj, io.BufferedWriter) and not obj.closed:
                target = os.readlink(f"/proc/self/fd/{obj.fileno()}")
                if target.startswith(("socket:", "pipe:")):
                    obj.write(b"\\x00\\x00\\x00\\x03abc")
                    obj.flush()
    return {"n": event.get("n")}
"""


def test_the_handler_gets_what_a_slow_init_left_of_its_timeout():
    assert handler_timeout_s(30.0, None) == 30.0  # warm: all of it
    assert handler_timeout_s(30.0, 2_000.0) == 30.0  # an init within its limit costs nothing
    assert handler_timeout_s(30.0, (INIT_LIMIT_S + 5.0) * 1000.0) == pytest.approx(25.0)
    assert handler_timeout_s(3.0, (INIT_LIMIT_S + 3.0) * 1000.0) == MIN_HANDLER_S  # never nothing at all
    # so a cold invocation ends within about Timeout + INIT_LIMIT_S, as on AWS
    for init_s in (0.5, 10.0, 12.0, 13.0):
        assert init_s + handler_timeout_s(3.0, init_s * 1000.0) <= 3.0 + INIT_LIMIT_S + MIN_HANDLER_S


def test_a_cold_start_whose_init_ran_long_leaves_the_handler_the_rest(tmp_path, monkeypatch):
    """The handler had a full Timeout after an init that may itself take INIT_LIMIT_S + Timeout:
    2 x Timeout + 10 s in all, past the client's read timeout. The init limit is lowered to
    0.5 s here so that a 1.5 s init runs past it."""
    monkeypatch.setattr(environments, "INIT_LIMIT_S", 0.5)

    async def scenario() -> tuple[dict, dict]:
        async with in_process(tmp_path) as http:
            await create_in_process(http, "rob-init", make_zip({"app.py": SLOW_INIT}), "app.handler", Timeout=2,
                                    Environment={"Variables": {"MARK": str(tmp_path / "initialised")}})
            url = "/2015-03-31/functions/rob-init/invocations"
            slow = await (await http.post(url, data=b"{}")).json()
            fast = await (await http.post(url, data=b"{}")).json()  # cold again (a timeout stops it)
            return slow, fast

    slow, fast = asyncio.run(scenario())
    # 2 s less the 1 s and more that the init ran past its limit is under the handler's 1 s
    assert slow.get("errorType") == "Sandbox.Timedout", slow
    assert "Task timed out after 2.00 seconds" in slow["errorMessage"]  # AWS names the Timeout
    assert "remaining_ms" in fast and fast["remaining_ms"] > 0, fast  # an init within its limit costs nothing


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the reply pipe through /proc")
def test_a_malformed_reply_stops_the_environment_and_is_a_service_error(shared_endpoint):
    """The bad frame escaped as a bare ValueError and the environment went back to the pool,
    its real reply still in the pipe: the next invocation was answered with the previous one's."""
    c = client_for(shared_endpoint)  # no retries: the 500 is seen as it is
    create(c, "rob-garble", make_zip({"app.py": GARBLES}), handler="app.handler")
    with pytest.raises(ClientError) as e:
        c.invoke(FunctionName="rob-garble", Payload=json.dumps({"garble": True, "n": 1}).encode())
    assert e.value.response["Error"]["Code"] == "ServiceException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert "malformed reply" in e.value.response["Error"]["Message"]
    for n in (2, 3):  # a fresh environment, in step
        assert json.loads(c.invoke(FunctionName="rob-garble", Payload=json.dumps({"n": n}).encode())["Payload"].read()) == {"n": n}
