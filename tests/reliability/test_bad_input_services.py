"""Bad input at the edges: configs, reward functions' results, raw Lambda requests.

Each must end as a clear error (one line for configs; AWS's error shape for
the emulator) or a counted failure; the emulator must answer every fuzzed
request and still serve a proper invoke afterwards. Hypothesis runs a bounded
number of examples; every request goes to 127.0.0.1.
"""

import asyncio
import io
import json
import textwrap
import urllib.error
import urllib.request
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roll_agentic.config import Config, ConfigError
from roll_agentic.hydra_config import load_config
from roll_agentic.reward.lambda_client import ServerlessRewardClient
from roll_agentic.reward.service import LocalServerless
from serverless.deploy import lambda_client
from tests.serverless.conftest import sdk_headers

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

BAD_FUNCTIONS = {
    "nan": "def handler(event, context):\n    return {'reward': float('nan')}\n",
    "text": "def handler(event, context):\n    return {'reward': 'high'}\n",
    "nokey": "def handler(event, context):\n    return {'score': 1.0}\n",
    "object": "def handler(event, context):\n    return object()\n",
    "raises": "def handler(event, context):\n    raise KeyError('env_return')\n",
    "ok": "def handler(event, context):\n    return {'reward': 0.25}\n",
}


# -- configs ---------------------------------------------------------------------------------
KEYS = ["trainer.total_steps", "algo.alpha", "engine", "reward", "reward.mode", "tasks.0.group_size",
        "engine.temperature", "nosuch.key", "tasks", "rollout.mode", "trainer.lr", "pools.0.num_engines", "+x"]
VALUES = st.one_of(st.integers(-5, 5).map(str), st.sampled_from(["", "abc", "null", "[1,2", "{a:", "1e400", "nan",
                                                                  "hf", "tail_batching", "'quoted", "${oops}"]),
                   st.text(max_size=8))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(["=", "==", ""]), VALUES), max_size=3))
def test_malformed_configs_give_a_config_or_one_line_error(items):
    overrides = [f"{k}{op}{v}" for k, op, v in items]
    try:
        cfg = load_config(overrides)
    except ConfigError as err:
        msg = str(err)
        assert msg and "\n" not in msg and "Traceback" not in msg
    else:
        assert isinstance(cfg, Config)


# -- the emulator ------------------------------------------------------------------------------
def _zip(src: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("fn.py", textwrap.dedent(src))
    return buf.getvalue()


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    svc = LocalServerless()
    url = svc.start(tmp_path_factory.mktemp("fuzz-emulator"))
    client = lambda_client(url, "us-east-1", max_attempts=3)
    for name, src in BAD_FUNCTIONS.items():
        client.create_function(FunctionName=f"roll-agentic-{name}", Runtime="python3.11", Handler="fn.handler",
                               Role="arn:aws:iam::000000000000:role/test", Code={"ZipFile": _zip(src)})
        client.get_waiter("function_active_v2").wait(FunctionName=f"roll-agentic-{name}",
                                                     WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    client.close()
    yield url
    svc.stop()


def test_reward_functions_with_bad_results_fail_with_a_reason_and_the_service_stays_up(emulator):
    async def score(name):
        client = ServerlessRewardClient(emulator, max_retries=1, timeout_s=10.0)
        try:
            return await client.score(name, {"env_return": 1.0})
        finally:
            await client.close()

    expected = {"nan": "not finite", "text": "not a number", "nokey": "without a 'reward' key",
                "object": "", "raises": "KeyError"}
    for name, why in expected.items():
        out = asyncio.run(score(name))
        assert not out.ok and out.value is None and why in out.error, (name, out)
    assert asyncio.run(score("ok")).value == 0.25


def _request(url: str, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url + path, data=body if method in ("POST", "PUT") else None, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback only
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


PATHS = st.sampled_from([
    "/2015-03-31/functions/roll-agentic-ok/invocations", "/2015-03-31/functions/roll-agentic-nan/invocations",
    "/2015-03-31/functions/nosuch/invocations", "/2015-03-31/functions", "/2015-03-31/functions/roll-agentic-ok",
    "/2015-03-31/functions/roll-agentic-ok/configuration", "/2015-03-31/functions/%2e%2e/invocations",
    "/2015-03-31/functions/" + "x" * 300 + "/invocations", "/2017-10-31/functions/roll-agentic-ok/concurrency",
    "/nope", "/_emulator/stats"])
HEADER_NAMES = st.sampled_from(["X-Amz-Invocation-Type", "X-Amz-Log-Type", "X-Amz-Client-Context", "Content-Type",
                                "Authorization", "X-Amz-Date", "Content-Encoding"])
HEADER_VALUES = st.one_of(st.sampled_from(["RequestResponse", "Event", "DryRun", "Tail", "None", "bogus", "",
                                           "!!notbase64", "gzip", "application/json", "AWS4-HMAC-SHA256 junk"]),
                          st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40))
BODIES = st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"{}", b"null", b'{"a": NaN}', b"[1,", b"\xff\xfe",
                                                             b'{"FunctionName": 3}', b'{"Code": {"ZipFile": "@@"}}']),
                   st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)),
                                   max_size=4).map(lambda d: json.dumps(d).encode()))


@FUZZ
@given(method=st.sampled_from(["POST", "GET", "PUT", "DELETE"]), path=PATHS, body=BODIES,
       headers=st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=4))
def test_fuzzed_lambda_requests_get_an_answer_in_aws_shape(emulator, method, path, body, headers):
    if method == "DELETE" and path.startswith("/2015-03-31/functions/roll-agentic-"):
        path = "/2015-03-31/functions/nosuch"  # keep the deployed functions for the other examples
    # Signed as an SDK signs (any key: the emulator has none set), so the fuzz reaches the
    # routes' own checks; fuzzed Authorization and X-Amz-Date values replace those.
    status, data, resp_headers = _request(emulator, method, path, body, sdk_headers() | headers)
    assert 200 <= status < 600
    if status >= 400:
        err = json.loads(data)  # a JSON error body naming what was wrong, never a stack trace page
        assert isinstance(err, dict) and (err.get("message") or err.get("Message"))
        assert resp_headers.get("x-amzn-ErrorType") or resp_headers.get("X-Amzn-ErrorType")


def test_the_emulator_still_serves_after_the_fuzz(emulator):
    status, data, _ = _request(emulator, "GET", "/_emulator/health", b"", {})
    assert status == 200 and json.loads(data)["ok"]
    status, data, _ = _request(emulator, "POST", "/2015-03-31/functions/roll-agentic-ok/invocations",
                               b'{"env_return": 1}', sdk_headers())
    assert status == 200 and json.loads(data) == {"reward": 0.25}
