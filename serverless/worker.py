"""The runtime inside one execution environment: a child process per environment.

Started as `python -m serverless.worker`, it limits its own memory, imports
the function's handler once (the init phase, timed for `Init Duration`) and
then serves invocations one at a time, for as long as the emulator keeps it
warm. It talks to the emulator over its stdin/stdout with length-prefixed
JSON frames (4-byte big-endian length, then UTF-8 JSON): a pipe round trip
costs tens of microseconds, which is what keeps a warm invoke in the low
milliseconds. The handler's own output is captured per invocation for the
log tail; anything written straight to file descriptor 1 goes to stderr (the
function's log file) so it can never corrupt the protocol.

Memory: Lambda's MemorySize is the resident limit, and the resident peak
(`Max Memory Used`) is sent back after init and after every invocation: the
emulator fails one that went over MemorySize, as Lambda would. On top,
once the handler is imported, RLIMIT_AS (address space) is set to what the
process has mapped by then + MemorySize + ADDRESS_SPACE_ALLOWANCE_MB, so a
runaway allocation ends in a MemoryError instead of swapping the host. The
limit is set after init, not before, because address space counts mapped
but untouched pages: importing torch maps ~650 MB (CPU build) to several GB
(CUDA build) of libraries it never touches, which a MemorySize-sized limit
would refuse. The allowance (1 GiB) leaves room for thread stacks and for a
lazy import of a CPU-sized library; import heavy libraries at module level,
which is Lambda's own advice for init work. MALLOC_ARENA_MAX defaults to 2 in
workers so that glibc's per-thread arenas do not eat the allowance.
"""

from __future__ import annotations

import base64
import decimal
import importlib
import io
import json
import os
import resource
import struct
import sys
import time
import traceback

ADDRESS_SPACE_ALLOWANCE_MB = 1024
_HEADER = struct.Struct(">I")


def read_frame(fd: int) -> dict | None:
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None  # the emulator closed the pipe: time to exit
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_frame(out, msg: dict) -> None:
    data = json.dumps(msg).encode()
    out.write(_HEADER.pack(len(data)) + data)
    out.flush()


class _Slots:
    __slots__: tuple[str, ...] = ()

    def __init__(self, values: dict | None = None) -> None:
        for name in self.__slots__:
            setattr(self, name, (values or {}).get(name))


class CognitoIdentity(_Slots):
    __slots__ = ("cognito_identity_id", "cognito_identity_pool_id")


class Client(_Slots):
    __slots__ = ("installation_id", "app_title", "app_version_name", "app_version_code", "app_package_name")


class ClientContext(_Slots):
    __slots__ = ("custom", "env", "client")


class LambdaContext:
    """The `context` argument of a handler, with the attributes of Lambda's Python runtime
    (awslambdaric's LambdaContext): they come from the same environment variables, so
    `memory_limit_in_mb` is a str there too ("128"), and `client_context` (None unless the
    caller sent X-Amz-Client-Context) and `identity` exist."""

    def __init__(self, request_id: str, deadline: float, client_context: dict | None = None) -> None:
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME")
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION")
        self.invoked_function_arn = os.environ.get("ROLL_AGENTIC_FUNCTION_ARN", "")
        self.tenant_id = None
        self.client_context = None
        if client_context is not None:
            self.client_context = ClientContext(client_context)
            self.client_context.client = None if self.client_context.client is None else Client(self.client_context.client)
        self.identity = CognitoIdentity()
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))

    def log(self, msg) -> None:
        sys.stdout.write(str(msg))


def _marshal(result) -> tuple[str, bool]:
    """The response as Lambda's Python runtime sends it: (text, is_base64_of_raw_bytes).

    Like its marshaller, bytes go back as they are (not JSON) and a Decimal as the JSON
    number it spells (`Decimal("1.50")` -> 1.50), NaN as NaN; anything else json.dumps
    refuses is a Runtime.MarshalError (TypeError/ValueError, raised).
    """
    if isinstance(result, (bytes, bytearray)):
        return base64.b64encode(bytes(result)).decode(), True
    decimals: list[str] = []

    def default(obj):
        if isinstance(obj, decimal.Decimal):
            decimals.append("NaN" if obj.is_nan() else str(obj))
            return f"\x00decimal{len(decimals) - 1}\x00"
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    text = json.dumps(result, default=default)
    for i, spelled in enumerate(decimals):
        text = text.replace(f'"\\u0000decimal{i}\\u0000"', spelled, 1)
    return text, False


def _error(etype: str, message: str, exc: BaseException | None = None, skip: int = 0) -> dict:
    tb = exc.__traceback__ if exc is not None else None
    for _ in range(skip):  # drop this runtime's own frames: the caller wants the function's
        tb = tb.tb_next if tb is not None else None
    stack = traceback.format_tb(tb) if tb is not None else []
    return {"errorMessage": message, "errorType": etype, "stackTrace": [s.rstrip() for s in stack]}


def _load_handler(spec: str):
    """Imports `module.function`; returns (handler, None) or (None, Lambda's init error)."""
    module_name, _, func_name = spec.rpartition(".")
    module_name = module_name.replace("/", ".")  # `src/app.handler`, as Lambda's runtime imports it
    if not module_name or not func_name:
        return None, _error("Runtime.MalformedHandlerName", f"Bad handler '{spec}': not enough values to unpack (expected 2, got 1)")
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as e:
        return None, _error("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {e}", e)
    except ImportError as e:
        return None, _error("Runtime.ImportModuleError", f"Unable to import module '{module_name}': {e}", e)
    except Exception as e:  # noqa: BLE001 - any failure of user init code is reported, not raised
        return None, _error(type(e).__name__, str(e), e)
    handler = getattr(module, func_name, None)
    if not callable(handler):
        return None, _error("Runtime.HandlerNotFound", f"Handler '{func_name}' missing on module '{module_name}'")
    return handler, None


class _Captured(io.StringIO):
    """The handler's sys.stdout and sys.stderr: kept for the log tail, yet with what code
    expects of a real stream. A bare StringIO has no fileno() and no encoding, so e.g.
    `subprocess.run(cmd, stdout=sys.stdout)` failed here while it works on Lambda; a child
    given it writes to the function's log file (fd 2), as one writing to fd 1 does."""

    encoding = "utf-8"

    def fileno(self) -> int:
        return 2


def _invoke(handler, msg: dict) -> dict:
    captured = _Captured()
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = captured
    fatal = False
    t0 = time.perf_counter()
    try:
        event = json.loads(msg["payload"]) if msg["payload"] else {}
        result = handler(event, LambdaContext(msg["id"], msg["deadline"], msg.get("client_context")))
        try:
            text, raw = _marshal(result)
            out = {"ok": True, "payload": text, "raw": raw}
        except (TypeError, ValueError, RecursionError) as e:
            out = {"ok": False, "payload": _error("Runtime.MarshalError", f"Unable to marshal response: {e}")}
    except MemoryError as e:
        fatal = True  # the heap may be in any state: do not reuse this environment
        out = {"ok": False, "payload": _error("Runtime.OutOfMemory", f"MemoryError: {e}", e)}
    except Exception as e:  # noqa: BLE001 - the handler's exception is the function's error
        print(f"[ERROR] {type(e).__name__}: {e}")
        print("".join(traceback.format_exception(e)[-40:]), end="")
        out = {"ok": False, "payload": _error(type(e).__name__, str(e), e, skip=1)}
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    out["duration_ms"] = (time.perf_counter() - t0) * 1000.0
    out["max_rss_mb"] = _memory_used_mb()
    out["logs"] = captured.getvalue()[-8192:]
    out["fatal"] = fatal
    return out


def _status_kb(field: str) -> int:
    """A field of /proc/self/status, in kB (0 where the kernel has none)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _mapped_bytes() -> int:
    """This process's address space now (VmSize), what RLIMIT_AS counts."""
    return _status_kb("VmSize:") * 1024


def _peak_resident_mb() -> int:
    """This function's own resident peak (VmHWM), Lambda's "Max Memory Used".

    Not getrusage's ru_maxrss: Linux carries that across exec, so a worker
    started by an emulator that had torch loaded reported the emulator's
    peak (179 MB for a one-line handler) and failed every 128 MB function.
    """
    return _status_kb("VmHWM:") // 1024


def _children_peak_mb() -> int:
    """The largest resident peak among the processes this worker started and waited for."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024  # kB on Linux


def _memory_used_mb() -> int:
    """Lambda's "Max Memory Used" as far as a process can tell: the worker's own peak, plus
    what its children used, since on Lambda the whole sandbox counts against MemorySize
    (code_exec's test processes included); before, a child could use any amount.

    A child's ru_maxrss starts at the worker's resident size when it forked (Linux keeps
    the pre-exec peak across exec), so a child peak no larger than the worker's own cannot
    be told apart from that inheritance and is left out rather than counted twice. Not
    caught: a child still running (or never waited for, e.g. an orphan re-parented to this
    subreaper), several children's use at the same moment (RUSAGE_CHILDREN holds the
    largest single one, not a sum), and a child below the worker's own peak. A lower
    bound, then, of the cgroup peak AWS measures.
    """
    own, children = _peak_resident_mb(), _children_peak_mb()
    return own + children if children > own else own


def main() -> int:
    t_start = time.perf_counter()
    # Orphans of the handler's processes (one started in a session of its own, whose parent
    # exited) are re-parented to this worker instead of init, so the emulator finds and kills
    # them with the environment (proctree.py). Imported here, before the function's code
    # replaces the emulator's modules on sys.path; a no-op off Linux.
    from serverless.proctree import become_subreaper

    become_subreaper()
    memory_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray writes to fd 1 (a child process, a C library) land in the log
    # Requests arrive on a private copy of fd 0; the function and what it starts read EOF
    # from stdin, as on Lambda. Sharing the request pipe, a child that read stdin (a tested
    # program's input()) blocked until the function's timeout, or swallowed the next request.
    proto_in = os.dup(0)  # not inheritable (PEP 446): no child gets it
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    task_root = os.environ["LAMBDA_TASK_ROOT"]
    os.chdir(task_root)
    # The function sees its own code first and none of the emulator's packages.
    project_root = os.environ.pop("ROLL_AGENTIC_PROJECT_ROOT", "")
    sys.path[:] = [task_root] + [p for p in sys.path if p not in ("", ".", project_root)]
    for name in [m for m in sys.modules if m == "serverless" or m.startswith("serverless.")]:
        if name != "__main__":
            del sys.modules[name]
    handler, init_error = _load_handler(os.environ["_HANDLER"])
    limit = _mapped_bytes() + (memory_mb + ADDRESS_SPACE_ALLOWANCE_MB) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    write_frame(proto_out, {
        "type": "ready", "init_ms": (time.perf_counter() - t_start) * 1000.0, "error": init_error,
        "max_rss_mb": _memory_used_mb(),
    })
    if init_error is not None:
        return 1
    while True:
        msg = read_frame(proto_in)
        if msg is None:
            return 0
        out = _invoke(handler, msg)
        write_frame(proto_out, out)
        if out["fatal"]:
            return 1


if __name__ == "__main__":
    sys.exit(main())
