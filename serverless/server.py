"""The emulator's HTTP surface: AWS Lambda's REST API on aiohttp, plus /_emulator/*.

Routes and shapes follow botocore's `lambda/2015-03-31` service model, so
the real boto3 client (its waiters, paginators and modelled exceptions)
works unchanged against `endpoint_url=http://127.0.0.1:PORT`. Every error is
answered in AWS's shape; an unexpected one becomes a 500 ServiceException
rather than taking the server down.
Who may call it is checked first, by access.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from serverless import access, errors, logfiles, sigv4
from serverless.concurrency import ConcurrencyLimiter
from serverless.environments import EnvironmentPool
from serverless.function_params import resolve_name
from serverless.functions import FunctionRecord, FunctionStore
from serverless.invoke import EVENT_MAX_AGE_S, Invoker
from serverless.meters import Meters

SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024
EVENT_PAYLOAD_LIMIT = 1024 * 1024
MAX_REQUEST_BYTES = 80 * 1024 * 1024  # a 50 MB zip, base64-encoded, with room to spare
ENDPOINT_FILE = "endpoint.json"
STATE_FIELDS = frozenset({"State", "StateReason", "StateReasonCode", "LastUpdateStatus",
                          "LastUpdateStatusReason", "LastUpdateStatusReasonCode"})


@dataclass
class ServerConfig:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0  # 0 = any free port (the one chosen is written to <state_dir>/endpoint.json)
    region: str = "us-east-1"
    account_concurrency: int = 1000  # AWS's default account limit
    keep_alive_s: float = 300.0  # an idle environment is stopped after this long
    event_retry_delay_s: float = 1.0
    max_event_backlog: int = 10_000  # Event invocations queued or running, at most
    max_event_backlog_mb: float = 256.0  # and their payloads' size
    max_event_age_s: float = EVENT_MAX_AGE_S  # a throttled Event is dropped once this old (AWS: 6 h)
    credentials: dict[str, sigv4.Credentials] = field(default_factory=dict)  # {} = any key, any signature
    allow_remote: bool = False  # also: accept any Host header, not only a loopback one
    # > 0: stop once that process is gone. A run that starts the emulator passes
    # its own pid, so a run killed (or crashed) without stopping it leaves none behind.
    parent_pid: int = 0
    # How long a create stays Pending and an update InProgress at least. Lambda's take a
    # moment (seconds), and it refuses what comes meanwhile (an Invoke of a Pending function,
    # a second update: 409 ResourceConflictException); clients wait with the waiters
    # function_active_v2 / function_updated_v2. Locally an unpack takes milliseconds, so
    # code that skipped the waiter passed here and failed on AWS.
    transition_s: float = 0.3


def _json_response(obj: dict, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(obj).encode(), status=status, content_type="application/json")


def _error_response(e: errors.LambdaError) -> web.Response:
    headers = {"x-amzn-ErrorType": e.code, "Content-Type": "application/json", **e.headers}
    return web.Response(body=e.body(), status=e.status, headers=headers)


def _client_context(request: web.Request) -> dict | None:
    """X-Amz-Client-Context: base64 of a JSON object, the handler's `context.client_context`."""
    raw = request.headers.get("X-Amz-Client-Context")
    if not raw:
        return None
    try:
        value = json.loads(base64.b64decode(raw, validate=True))
    except (ValueError, UnicodeDecodeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise errors.invalid_parameter("Client context must be a valid Base64-encoded JSON object.")
    return value


class Emulator:
    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        state = Path(cfg.state_dir)
        self.store = FunctionStore(state, cfg.region)
        self.pool = EnvironmentPool(cfg.region, state / "logs", cfg.keep_alive_s)
        self.limiter = ConcurrencyLimiter(cfg.account_concurrency)
        self.meters = Meters()
        self.invoker = Invoker(
            self.store, self.pool, self.limiter, self.meters, state / "logs", cfg.event_retry_delay_s,
            max_event_backlog=cfg.max_event_backlog, max_event_backlog_mb=cfg.max_event_backlog_mb,
            max_event_age_s=cfg.max_event_age_s,
        )
        self.stop_event = asyncio.Event()
        self._activations: dict[str, asyncio.Task] = {}  # creates and code updates: the unpacking
        self._settling: dict[str, asyncio.Task] = {}  # configuration updates: InProgress -> Successful
        for rec in self.store.functions.values():
            if rec.reserved_concurrency is not None:
                self.limiter.set_reserved(rec.name, rec.reserved_concurrency)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REQUEST_BYTES, middlewares=[self._middleware])
        fn = "/2015-03-31/functions"
        app.router.add_post(fn, self.create_function)
        app.router.add_get(fn, self.list_functions)
        app.router.add_get(fn + "/", self.list_functions)
        app.router.add_get(fn + "/{name}", self.get_function)
        app.router.add_delete(fn + "/{name}", self.delete_function)
        app.router.add_get(fn + "/{name}/configuration", self.get_configuration)
        app.router.add_put(fn + "/{name}/configuration", self.update_configuration)
        app.router.add_put(fn + "/{name}/code", self.update_code)
        app.router.add_post(fn + "/{name}/invocations", self.invoke)
        app.router.add_put("/2017-10-31/functions/{name}/concurrency", self.put_concurrency)
        app.router.add_get("/2019-09-30/functions/{name}/concurrency", self.get_concurrency)
        app.router.add_delete("/2017-10-31/functions/{name}/concurrency", self.delete_concurrency)
        app.router.add_get("/_emulator/health", self.health)
        app.router.add_get("/_emulator/stats", self.stats)
        app.router.add_get("/_emulator/logs/{name}", self.logs)
        app.router.add_post("/_emulator/shutdown", self.shutdown)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            await access.authorize(request, self.cfg.credentials, self.cfg.allow_remote)
            return await handler(request)
        except errors.LambdaError as e:
            return _error_response(e)
        except web.RequestPayloadError as e:  # e.g. a body that is not the gzip its Content-Encoding says
            # The caller's fault, and a 400: a 500 (ServiceException) is retried by every client.
            return _error_response(errors.invalid_content(f"Could not read the request body: {e}"))
        except web.HTTPRequestEntityTooLarge:
            return _error_response(errors.too_large(MAX_REQUEST_BYTES))
        except web.HTTPNotFound:
            return _error_response(errors.LambdaError("UnknownOperationException", 404, f"Unknown operation {request.method} {request.path}"))
        except web.HTTPMethodNotAllowed:
            return _error_response(errors.LambdaError("UnknownOperationException", 405, f"Unknown operation {request.method} {request.path}"))
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - never let one request take the server down
            return _error_response(errors.service_error(f"{type(e).__name__}: {e}"))

    async def _body_json(self, request: web.Request) -> dict:
        raw = await request.read()
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError, RecursionError) as e:  # nested past the parser's depth
            raise errors.invalid_content(f"Could not parse request body into json: {e}") from None
        if not isinstance(body, dict):
            raise errors.invalid_content("The request body must be a JSON object")
        return body

    def _activate_soon(self, rec: FunctionRecord) -> None:
        """Pending -> Active off the request path, as Lambda does; the waiters poll for it."""

        async def run() -> None:
            await asyncio.sleep(self.cfg.transition_s)
            await asyncio.to_thread(self.store.activate, rec)
            if rec.state == "Active":  # the older code goes once no environment runs it
                self.store.prune_code(rec, self.pool.code_in_use(rec.name))

        self._activations[rec.name] = asyncio.get_running_loop().create_task(run())

    def _settle_soon(self, rec: FunctionRecord) -> None:
        """InProgress -> Successful after a configuration update, off the request path."""

        async def run() -> None:
            await asyncio.sleep(self.cfg.transition_s)
            if self.store.functions.get(rec.name) is rec:
                self.store.settle(rec)

        self._settling[rec.name] = asyncio.get_running_loop().create_task(run())

    def _check_no_update_in_progress(self, rec: FunctionRecord) -> None:
        """Lambda refuses a change while the function is Pending or its last update is InProgress."""
        if rec.state == "Pending":
            raise errors.conflict(f"The operation cannot be performed at this time. The function is currently in the following state: {rec.state}")
        busy = [t for t in (self._activations.get(rec.name), self._settling.get(rec.name)) if t is not None and not t.done()]
        if busy or rec.last_update_status == "InProgress":
            raise errors.update_in_progress(rec.name, self.cfg.region)

    async def _ready(self, rec: FunctionRecord) -> None:
        task = self._activations.get(rec.name)
        if task is not None and not task.done():
            await task
        if rec.state != "Active":
            raise errors.conflict(f"The operation cannot be performed at this time. The function is currently in the following state: {rec.state}")

    # -- functions ------------------------------------------------------------

    async def create_function(self, request: web.Request) -> web.Response:
        rec = self.store.create(await self._body_json(request))
        self._activate_soon(rec)
        return _json_response(rec.configuration(self.cfg.region), 201)

    async def update_code(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"])
        body = await self._body_json(request)
        self._check_no_update_in_progress(rec)  # one update at a time: AWS answers 409, it does not queue
        self.store.update_code(rec, body)
        self.pool.drop_function(rec.name, keep_tag=rec.environment_tag)
        self._activate_soon(rec)
        return _json_response(rec.configuration(self.cfg.region))

    async def update_configuration(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"])
        body = await self._body_json(request)
        if rec.state != "Active" and rec.state != "Pending":
            raise errors.conflict(f"The operation cannot be performed at this time. The function is currently in the following state: {rec.state}")
        self._check_no_update_in_progress(rec)
        self.store.update_configuration(rec, body)
        self.pool.drop_function(rec.name)  # new memory, timeout or environment: fresh environments
        self._settle_soon(rec)
        return _json_response(rec.configuration(self.cfg.region))

    async def get_function(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"], request.query.get("Qualifier"))
        out = {
            "Configuration": rec.configuration(self.cfg.region),
            "Code": {"RepositoryType": "S3", "Location": f"file://{self.store.root / rec.name / 'code.zip'}"},
        }
        if rec.reserved_concurrency is not None:
            out["Concurrency"] = {"ReservedConcurrentExecutions": rec.reserved_concurrency}
        return _json_response(out)

    async def get_configuration(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"], request.query.get("Qualifier"))
        return _json_response(rec.configuration(self.cfg.region))

    async def list_functions(self, request: web.Request) -> web.Response:
        raw = request.query.get("MaxItems", "50")
        try:
            max_items = int(raw)
        except ValueError:
            raise errors.invalid_parameter(f"MaxItems must be an integer, got {raw!r}") from None
        if not 1 <= max_items <= 10000:
            raise errors.invalid_parameter("MaxItems must be between 1 and 10000")
        page, nxt = self.store.page(request.query.get("Marker"), min(max_items, 50))
        # ListFunctions returns a subset of FunctionConfiguration: "To get the additional fields
        # (State, StateReasonCode, StateReason, LastUpdateStatus, LastUpdateStatusReason,
        # LastUpdateStatusReasonCode) for a function or version, use GetFunction" (API reference).
        out: dict = {"Functions": [
            {k: v for k, v in r.configuration(self.cfg.region).items() if k not in STATE_FIELDS} for r in page
        ]}
        if nxt:
            out["NextMarker"] = nxt
        return _json_response(out)

    async def delete_function(self, request: web.Request) -> web.Response:
        # A Qualifier names a version to delete: none exists here, so 404 (it deleted the function).
        rec = self.store.get(request.match_info["name"], request.query.get("Qualifier"))
        # An unpacking that finished after the delete wrote the directory and config.json
        # back: the deleted function returned at the next start, its code left on disk.
        # A loop: an update may start another while we wait; none can between it and the delete.
        while (task := self._activations.get(rec.name)) is not None and not task.done():
            await task
        if self.store.functions.get(rec.name) is not rec:  # deleted (or re-created) meanwhile
            raise errors.not_found(rec.name, self.cfg.region)
        self._activations.pop(rec.name, None)
        settling = self._settling.pop(rec.name, None)
        if settling is not None:
            settling.cancel()
        self.store.delete(rec)
        self.pool.drop_function(rec.name)
        self.limiter.forget(rec.name)
        self.invoker.forget(rec.name)
        return web.Response(status=204)

    # -- concurrency ------------------------------------------------------------

    async def put_concurrency(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"])
        value = (await self._body_json(request)).get("ReservedConcurrentExecutions")
        if not isinstance(value, int) or isinstance(value, bool):
            raise errors.invalid_parameter("ReservedConcurrentExecutions must be an integer >= 0")
        self.limiter.check_reservation(rec.name, value)
        self.limiter.set_reserved(rec.name, value)
        self.store.set_concurrency(rec, value)
        return _json_response({"ReservedConcurrentExecutions": value})

    async def get_concurrency(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"])
        out = {} if rec.reserved_concurrency is None else {"ReservedConcurrentExecutions": rec.reserved_concurrency}
        return _json_response(out)

    async def delete_concurrency(self, request: web.Request) -> web.Response:
        rec = self.store.get(request.match_info["name"])
        self.limiter.set_reserved(rec.name, None)
        self.store.set_concurrency(rec, None)
        return web.Response(status=204)

    # -- invoke ---------------------------------------------------------------

    async def invoke(self, request: web.Request) -> web.Response:
        # no versions or aliases here: AWS answers 404 for one that does not exist
        rec = self.store.get(request.match_info["name"], request.query.get("Qualifier"))
        itype = request.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        if itype not in ("RequestResponse", "Event", "DryRun"):
            raise errors.invalid_parameter(f"InvocationType must be RequestResponse, Event or DryRun, got {itype!r}")
        limit = EVENT_PAYLOAD_LIMIT if itype == "Event" else SYNC_PAYLOAD_LIMIT
        body = await request.read()
        if len(body) > limit:
            raise errors.too_large(limit)
        try:
            payload = body.decode()
            if payload:  # none is the empty event; whitespace alone is no JSON, here as at the worker
                json.loads(payload)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise errors.invalid_content(f"Could not parse request body into json: {e}") from None
        if rec.state == "Pending":  # Lambda refuses it (409) rather than waiting: see ServerConfig.transition_s
            raise errors.conflict("The operation cannot be performed at this time. The function is currently in the following state: Pending")
        if rec.state != "Active" or rec.last_update_status == "InProgress":
            await self._ready(rec)  # an update under way: AWS runs the previous code meanwhile; here it waits for the new
        if itype == "DryRun":
            return web.Response(status=204)
        if itype == "Event":
            rid = self.invoker.submit_event(rec.name, payload)  # the id the function sees too
            return web.Response(status=202, headers={"x-amzn-RequestId": rid})
        result = await self.invoker.invoke(rec, payload, client_context=_client_context(request))
        headers = {"X-Amz-Executed-Version": "$LATEST", "x-amzn-RequestId": result.request_id, "Content-Type": "application/json"}
        if result.function_error:
            headers["X-Amz-Function-Error"] = result.function_error
        if request.headers.get("X-Amz-Log-Type") == "Tail":
            headers["X-Amz-Log-Result"] = result.log_tail_b64()
        return web.Response(body=result.payload, headers=headers)

    # -- emulator-only --------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return _json_response({"ok": True, "pid": os.getpid(), "functions": len(self.store.functions)})

    async def stats(self, request: web.Request) -> web.Response:
        snap = self.meters.snapshot()
        for name, rec in self.store.functions.items():
            entry = snap["functions"].setdefault(name, self.meters.of(name).snapshot())
            entry.update(memory_mb=rec.memory_mb, timeout_s=rec.timeout_s, reserved_concurrency=rec.reserved_concurrency, **self.pool.counts(name))
        snap["events_pending"] = self.invoker.events_pending
        snap["account_concurrency"] = self.limiter.account_limit
        return _json_response(snap)

    async def logs(self, request: web.Request) -> web.Response:
        name = resolve_name(request.match_info["name"])  # a name, never a path
        log_dir = self.invoker.log_dir
        if name not in self.store.functions and not logfiles.log_path(log_dir, name).is_file():
            raise errors.not_found(name, self.cfg.region)
        lines_arg = request.query.get("lines", "100")
        if not lines_arg.isdigit() or int(lines_arg) < 1:
            raise errors.invalid_parameter(f"lines must be a whole number >= 1, got {lines_arg!r}")
        # Read from the end, off the loop: a long run's log is large, and every request waited on it.
        text = await asyncio.to_thread(logfiles.tail, log_dir, name, int(lines_arg))
        return web.Response(text=text, content_type="text/plain")

    async def shutdown(self, request: web.Request) -> web.Response:
        self.stop_event.set()
        return _json_response({"stopping": True})

    async def close(self) -> None:
        for task in self._activations.values():
            if not task.done():
                await task
        for task in self._settling.values():
            task.cancel()
        await self.invoker.close()
        await self.pool.close()
