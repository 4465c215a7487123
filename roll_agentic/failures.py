"""Would a failed episode fail the same way if it were rolled again?

The trajectory buffer stops a run whose every group fails. A failure that may
pass (an engine or the emulator restarting, a refused or reset connection, a
timeout on a busy host) is given `rollout.max_failing_s` (5 minutes) before
the run stops. A failure of the user's own code (the reward function raised,
an env's reset or step raised or broke the env contract, a reward that is no
number) recurs on every retry: waiting on it only hid the cause for those
minutes, so the buffer stops at once on a run of them (rollout/buffer.py).

Each failure is classified where its exception is still at hand (the worker's
env calls, the reward clients) and travels as `Trajectory.deterministic`.
When in doubt a failure counts as transient: misread as transient it costs
the old wait, misread as deterministic it would stop a healthy run.
"""

from __future__ import annotations

import builtins

# In the name of a library's exception type, what says "the network or a clock":
# requests' ReadTimeout and ConnectionError, urllib3's NewConnectionError, httpx's
# ConnectError, urllib's URLError, an HTTP client's 503 (HTTPError), gRPC's UNAVAILABLE.
_TRANSIENT_NAME_PARTS = ("timeout", "timedout", "connect", "unavailable", "throttl", "ratelimit",
                         "urlerror", "httperror")

# What a Lambda runtime (and the emulator) reports besides the function's own exception type.
# These three are the host's doing, or may be (a worker killed, a slow cold start); the other
# Runtime.* / Function.* errors (ImportModuleError, UserCodeSyntaxError, HandlerNotFound,
# MarshalError, ResponseSizeTooLarge, ...) are the function's code, deterministic.
_TRANSIENT_RUNTIME_ERRORS = ("Sandbox.Timedout", "Runtime.ExitError", "Runtime.OutOfMemory")


def transient_type_name(name: str) -> bool:
    """Whether an exception type, known only by its name (a Lambda function error's
    `errorType`), is one that may pass: an OSError (connections, timeouts, sockets),
    a library's network or time-out error, or the runtime's own failure."""
    if name in _TRANSIENT_RUNTIME_ERRORS:
        return True
    leaf = name.rsplit(".", 1)[-1]
    builtin = getattr(builtins, leaf, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return issubclass(builtin, OSError)  # ConnectionError, TimeoutError, BrokenPipeError, ...
    if name.startswith(("Runtime.", "Function.")):
        return False
    lowered = leaf.lower()
    return any(part in lowered for part in _TRANSIENT_NAME_PARTS)


def deterministic_error(err: BaseException) -> bool:
    """Whether the user's code raising `err` would raise again on a retry: False for an
    OSError or a library's network or time-out error, in `err` or in what caused it
    (`raise SimulatorDown(...) from ConnectionRefusedError(...)`)."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) or transient_type_name(type(cur).__name__):
            return False
        cur = cur.__cause__ or cur.__context__
    return True


def deterministic_type_name(name: str) -> bool:
    """`deterministic_error` for an exception known only by its type's name."""
    return bool(name) and not transient_type_name(name)
