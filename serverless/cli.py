"""`roll-agentic serverless ...`: start the emulator, deploy, list, invoke, logs, stop.

Every client command talks to `--endpoint-url`, by default the emulator last
started with the same `--state-dir` (recorded in `<state_dir>/endpoint.json`).
`python -m serverless.cli ...` works the same without the roll-agentic CLI.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import functools
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from roll_agentic.arg_types import at_least, non_negative, positive
from serverless import deploy as deploy_mod

DEFAULT_STATE_DIR = os.environ.get("ROLL_AGENTIC_SERVERLESS_STATE_DIR", ".cache/serverless")
FUNCTION_PREFIX = deploy_mod.FUNCTION_PREFIX  # what `deploy` puts before a module's name
LIST_SHOWS = "`roll-agentic serverless list` shows the deployed names"


def _endpoint(args: argparse.Namespace) -> str:
    if args.endpoint_url:
        return args.endpoint_url
    from serverless.run import read_endpoint

    rec = read_endpoint(Path(args.state_dir))
    if not rec:
        raise SystemExit(
            f"no running emulator recorded in {args.state_dir}/endpoint.json: start one with "
            "`roll-agentic serverless start`, or pass --endpoint-url"
        )
    return rec["endpoint_url"]


def _port(text: str) -> int:
    """A TCP port: 0 (any free one) to 65535 (the OS would silently take 70000 as 4464)."""
    port = at_least(0)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 0 to 65535, got {port}")
    return port


def _lambda_limit(low: int, high: int, unit: str):
    """An integer within one of AWS Lambda's limits: the service refuses anything outside,
    so the flag says so before anything is zipped or sent."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low} to {high} {unit} (AWS Lambda's limits), got {value}")
        return value

    return parse


def _keys(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.access_key and args.secret_key:
        return args.access_key, args.secret_key
    return deploy_mod.env_credentials()


def _client(args: argparse.Namespace):
    ak, sk = _keys(args)
    return deploy_mod.lambda_client(_endpoint(args), args.region, ak, sk)


def emulator_call(endpoint: str, method: str, path: str, region: str = "us-east-1",
                  access_key: str | None = None, secret_key: str | None = None) -> bytes:
    """A SigV4-signed call to one of the emulator's own routes (/_emulator/...)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    ak = access_key or deploy_mod.PLACEHOLDER_KEY
    sk = secret_key or deploy_mod.PLACEHOLDER_KEY
    req = AWSRequest(method=method, url=endpoint.rstrip("/") + path, data=b"")
    SigV4Auth(Credentials(ak, sk), "lambda", region).add_auth(req)
    prepared = req.prepare()
    http = urllib.request.Request(prepared.url, data=prepared.body or None, method=method, headers=dict(prepared.headers))
    try:
        with urllib.request.urlopen(http, timeout=30) as resp:  # noqa: S310 - the endpoint is the user's own
            return resp.read()
    except urllib.error.HTTPError as e:  # the emulator's error body says what was wrong
        body = e.read().decode(errors="replace")
        try:
            body = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            pass
        raise OSError(f"{e.headers.get('x-amzn-ErrorType', f'HTTP {e.code}')}: {body}") from None


# -- commands ---------------------------------------------------------------


def _service_errors(cmd):
    """A client command that ends on the service's error in one line, not a traceback.

    What the service refuses (a missing function, a payload that is not
    JSON, a bad signature) and what never reached it (no emulator at the
    endpoint, a module path that does not exist) are the user's to fix,
    and the error already says what to fix.
    """

    @functools.wraps(cmd)
    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return cmd(args)
        except ClientError as e:
            err = e.response.get("Error", {})
            code = err.get("Code", "error")
            hint = _name_hint(args) if code == "ResourceNotFoundException" else ""
            raise SystemExit(f"{args.serverless_cmd}: {code}: {err.get('Message', e)}{hint}") from None
        except (BotoCoreError, OSError, ValueError) as e:  # ValueError: e.g. a module no runtime can import
            hint = _name_hint(args) if str(e).startswith("ResourceNotFoundException") else ""  # `logs`
            raise SystemExit(f"{args.serverless_cmd}: {e}{hint}") from None

    return run


def _name_hint(args: argparse.Namespace) -> str:
    """"; did you mean roll-agentic-my_reward? (...)" for a function name that is not deployed (`invoke`, `logs`).

    `deploy rewards/my_reward.py` names its function roll-agentic-my_reward, and
    `invoke my_reward` then failed with a bare "Function not found". The deployed
    names are asked for; where the emulator cannot say, a name without the prefix
    still gets the prefixed one.
    """
    name = getattr(args, "name", None)
    if args.serverless_cmd not in ("invoke", "logs") or not name or ":" in name:  # an ARN: as given
        return ""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = _client(args)
        deployed = [f["FunctionName"] for page in client.get_paginator("list_functions").paginate()
                    for f in page["Functions"]]
    except (BotoCoreError, ClientError, OSError):
        deployed = None
    prefixed = f"{FUNCTION_PREFIX}{name}"
    if not name.startswith(FUNCTION_PREFIX) and (deployed is None or prefixed in deployed):
        guess = prefixed
    else:  # a misspelt name: compared without the prefix, which every deployed name shares
        stems = {d.removeprefix(FUNCTION_PREFIX): d for d in deployed or []}
        close = difflib.get_close_matches(name.removeprefix(FUNCTION_PREFIX), list(stems), n=1, cutoff=0.6)
        guess = stems[close[0]] if close else ""
    return f"; did you mean {guess}? ({LIST_SHOWS})" if guess else f" ({LIST_SHOWS})"


def cmd_start(args: argparse.Namespace) -> int:
    from serverless import sigv4
    from serverless.run import run
    from serverless.server import ServerConfig

    ak, sk = _keys(args)
    creds = {ak: sigv4.Credentials(ak, sk)} if ak and sk else {}
    run(ServerConfig(
        state_dir=Path(args.state_dir), host=args.host, port=args.port, region=args.region,
        account_concurrency=args.account_concurrency, keep_alive_s=args.keep_alive,
        event_retry_delay_s=args.event_retry_delay, credentials=creds, allow_remote=args.allow_remote,
        parent_pid=args.parent_pid, max_event_backlog=args.max_event_backlog,
        max_event_backlog_mb=args.max_event_backlog_mb, transition_s=args.state_transition_delay, max_event_age_s=args.max_event_age,
    ))
    return 0


@_service_errors
def cmd_deploy(args: argparse.Namespace) -> int:
    path = _module_path(args.path)
    missing = "" if path.exists() or path.with_suffix(".py").is_file() else _nothing_at(args.path)
    if missing:
        raise FileNotFoundError(missing)
    spec = deploy_mod.spec_for(path, name=args.name, handler=args.handler,
                               memory_mb=args.memory, timeout_s=args.timeout)
    cfg = deploy_mod.deploy(_client(args), spec)
    if spec.missing_on_lambda:
        print(f"warning: {deploy_mod.missing_imports_warning(Path(args.path).name, spec.missing_on_lambda)}", file=sys.stderr)
    print(f"deployed {cfg['FunctionName']} ({cfg['Handler']}, {cfg['MemorySize']} MB, "
          f"timeout {cfg['Timeout']} s, {cfg['CodeSize']} bytes): {cfg['State']}")
    return 0


def _module_path(given: str) -> Path:
    """A path as given, or the file of a module named as a task's `reward` names it
    (`code_exec` for rewards/code_exec.py, `my_pkg.scoring`), when no such path exists."""
    path = Path(given)
    if path.exists() or path.with_suffix(".py").is_file() or "/" in given or given.endswith(".py"):
        return path
    from roll_agentic.reward.reward_ref import source_file, syntax_problem  # only for a module name

    if syntax_problem(given):
        return path  # spec_for says there is nothing to deploy there
    try:
        return source_file(given)
    except FileNotFoundError:
        return path


def _nothing_at(given: str) -> str:
    """Why there is nothing to deploy at `given`, with the closest name there is, or "" (then spec_for says it).

    `deploy my_rewrd` said only "nothing to deploy at my_rewrd", where `train` says of the
    same reward "(did you mean my_reward?)": the same hint, from the same place (`source_file`).
    """
    path = Path(given)
    if "/" in given or given.endswith(".py"):
        close = _close_entry(path)
        return f"nothing to deploy at {given}: no such file or folder (did you mean {close}?)" if close else ""
    from roll_agentic.reward.reward_ref import source_file, syntax_problem

    problem = syntax_problem(given)
    if problem:  # `rewards.code_exec`: what to write instead, as `train` says it
        return f"nothing to deploy at {given}: no such file or folder; as a module name, expected {problem}"
    try:
        source_file(given)
    except FileNotFoundError as err:
        return f"nothing to deploy at {given}: no such file or folder here, and {err}"
    return ""


def _close_entry(path: Path) -> str:
    """The entry of `path`'s folder closest to its name (rewards/code_exec.py for rewards/code_exe.py), or ""."""
    try:
        names = [p.name for p in path.parent.iterdir() if p.is_dir() or p.suffix == ".py"]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
    return str(path.parent / close[0]) if close else ""


@_service_errors
def cmd_list(args: argparse.Namespace) -> int:
    client = _client(args)
    functions = [f for page in client.get_paginator("list_functions").paginate() for f in page["Functions"]]
    ak, sk = _keys(args)
    try:
        stats = json.loads(emulator_call(_endpoint(args), "GET", "/_emulator/stats", args.region, ak, sk))["functions"]
    except OSError:
        stats = {}  # not our emulator (e.g. AWS itself): no meters to show
    if args.json:
        print(json.dumps({"functions": functions, "stats": stats}, indent=1))
        return 0
    head = f"{'function':32} {'mem':>5} {'tmo':>4} {'inv':>7} {'cold':>5} {'thr':>5} {'err':>5} {'p50ms':>8} {'p99ms':>8} {'GB-s':>10} {'cost $':>11}"
    print(head)
    for f in functions:
        s = stats.get(f["FunctionName"], {})
        print(f"{f['FunctionName'][:32]:32} {f['MemorySize']:>5} {f['Timeout']:>4} {s.get('invocations', 0):>7} "
              f"{s.get('cold_starts', 0):>5} {s.get('throttles', 0):>5} {s.get('errors', 0):>5} "
              f"{s.get('duration_ms_p50', 0):>8.2f} {s.get('duration_ms_p99', 0):>8.2f} "
              f"{s.get('gb_s', 0):>10.4f} {s.get('cost_usd', 0):>11.8f}")
    if not functions:
        print("(no functions deployed)")
    return 0


@_service_errors
def cmd_invoke(args: argparse.Namespace) -> int:
    client = _client(args)
    resp = client.invoke(FunctionName=args.name, Payload=args.payload.encode(),
                         InvocationType="Event" if args.event else "RequestResponse",
                         LogType="None" if args.event else "Tail")
    if args.event:
        print(f"queued (HTTP {resp['StatusCode']})")
        return 0
    print(resp["Payload"].read().decode())
    if args.log and resp.get("LogResult"):
        print(base64.b64decode(resp["LogResult"]).decode(), file=sys.stderr, end="")
    if resp.get("FunctionError"):
        print(f"function error: {resp['FunctionError']}", file=sys.stderr)
        return 1
    return 0


@_service_errors
def cmd_logs(args: argparse.Namespace) -> int:
    ak, sk = _keys(args)
    print(emulator_call(_endpoint(args), "GET", f"/_emulator/logs/{args.name}?lines={args.lines}", args.region, ak, sk).decode(), end="")
    return 0


@_service_errors
def cmd_stop(args: argparse.Namespace) -> int:
    ak, sk = _keys(args)
    endpoint = _endpoint(args)
    emulator_call(endpoint, "POST", "/_emulator/shutdown", args.region, ak, sk)
    print(f"stopping the emulator at {endpoint}")
    return 0


# -- parser -------------------------------------------------------------------


def _common(p: argparse.ArgumentParser, client: bool = True) -> None:
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                   help="the emulator's state directory: functions, logs, endpoint.json (default: %(default)s; "
                        "$ROLL_AGENTIC_SERVERLESS_STATE_DIR sets it)")
    p.add_argument("--region", default="us-east-1", help="region name used in ARNs and signatures (default: %(default)s)")
    p.add_argument("--access-key", default=None, help="access key id (default: $ROLL_AGENTIC_SERVERLESS_ACCESS_KEY)")
    p.add_argument("--secret-key", default=None, help="secret key (default: $ROLL_AGENTIC_SERVERLESS_SECRET_KEY)")
    if client:
        p.add_argument("--endpoint-url", default=None, help="the Lambda endpoint (default: the emulator last started with --state-dir)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds `serverless` with its sub-commands to an argparse subparsers object."""
    sp = subparsers.add_parser("serverless", help="the local AWS Lambda emulator and reward deployment",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = sp.add_subparsers(dest="serverless_cmd", required=True)

    p = sub.add_parser("start", help="run the emulator in the foreground (until `stop` or Ctrl-C)")
    _common(p, client=False)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on, loopback only unless --allow-remote (default: %(default)s)")
    p.add_argument("--port", type=_port, default=9001, help="port to listen on, 0 = any free port (default: %(default)s)")
    p.add_argument("--account-concurrency", type=at_least(1), default=1000,
                   help="account-wide concurrent executions (default: %(default)s, as AWS's)")
    p.add_argument("--keep-alive", type=non_negative, default=300.0, help="seconds an idle execution environment stays warm (default: %(default)s)")
    p.add_argument("--event-retry-delay", type=non_negative, default=1.0,
                   help="seconds before retrying a failed Event invocation, doubling at each retry (default: %(default)s)")
    p.add_argument("--max-event-backlog", type=at_least(1), default=10_000,
                   help="Event invocations queued or running at most; more are refused with a 429, which boto3 "
                        "retries (default: %(default)s)")
    p.add_argument("--max-event-backlog-mb", type=positive, default=256.0,
                   help="MB of Event payloads queued or running at most (default: %(default)s)")
    p.add_argument("--max-event-age", type=positive, default=6 * 3600.0, help="seconds a throttled Event keeps trying before it is dropped (default: %(default)s, AWS's 6 h)")
    p.add_argument("--state-transition-delay", type=non_negative, default=0.3,
                   help="seconds a new function stays Pending and an update InProgress at least; what arrives "
                        "meanwhile gets AWS's 409 ResourceConflictException; wait with the boto3 waiters (default: %(default)s)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (the emulator runs any code it is sent)")
    p.add_argument("--parent-pid", type=int, default=0,
                   help="stop once this process is gone; training runs pass their own, so none is left behind "
                        "(default: 0, none)")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("deploy", help="zip a module (e.g. rewards/code_exec.py) or directory and create or update the function")
    _common(p)
    p.add_argument("path", help="a .py module (handler `<module>.handler`), a directory (give --handler), or a "
                                "module named as a task's reward names it (code_exec, my_pkg.scoring)")
    p.add_argument("--name", default=None, help=f"function name (default: {FUNCTION_PREFIX}<module>)")
    p.add_argument("--handler", default=None, help="handler as module.function (default: <module>.handler)")
    p.add_argument("--memory", type=_lambda_limit(128, 10240, "MB"), default=None,
                   help="MemorySize in MB, 128 to 10240 (default: LAMBDA_MEMORY_MB in the module, else 256)")
    p.add_argument("--timeout", type=_lambda_limit(1, 900, "s"), default=None,
                   help="Timeout in s, 1 to 900 (default: LAMBDA_TIMEOUT_S in the module, else 30)")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("list", help="deployed functions with their meters (invocations, cold starts, cost)")
    _common(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("invoke", help="invoke a function and print its response")
    _common(p)
    p.add_argument("name", help=f"function name, as `list` shows it ({FUNCTION_PREFIX}<module> for what `deploy` named)")
    p.add_argument("--payload", default="{}", help="the event as JSON (default: %(default)s)")
    p.add_argument("--event", action="store_true", help="asynchronous invocation (InvocationType=Event)")
    p.add_argument("--log", action="store_true", help="print the log tail (with its REPORT line) to stderr")
    p.set_defaults(func=cmd_invoke)

    p = sub.add_parser("logs", help="the last lines of a function's log")
    _common(p)
    p.add_argument("name", help=f"function name, as `list` shows it ({FUNCTION_PREFIX}<module> for what `deploy` named)")
    p.add_argument("--lines", type=at_least(1), default=50, help="how many of the last lines (default: %(default)s)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("stop", help="stop the running emulator")
    _common(p)
    p.set_defaults(func=cmd_stop)
    return sp


def main(argv: list[str] | None = None) -> int:
    from roll_agentic.cli import name_commands

    parser = argparse.ArgumentParser(prog="python -m serverless.cli")
    sub = parser.add_subparsers(dest="cmd", required=True)
    name_commands(add_parser(sub))
    args = parser.parse_args(["serverless", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
