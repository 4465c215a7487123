"""The parameters of CreateFunction and UpdateFunctionConfiguration, checked as AWS checks them.

Each check raises the error AWS answers with (`errors.py`): a value outside the
service model's pattern, enum or length is a ValidationException (botocore raises
a plain ClientError for it), a value AWS refuses on its own rules an
InvalidParameterValueException. Code that passes here must pass there.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import zipfile
import zlib
from typing import Any

from serverless import errors

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ENV_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]+$")  # AWS's pattern for variable names
# A function named by name, ARN or partial ARN, optionally with a qualifier (`name:prod`,
# `arn:aws:lambda:us-east-1:123456789012:function:name:7`): the model's FunctionName pattern.
FULL_NAME_RE = re.compile(
    r"^(?:arn:aws[a-zA-Z-]*:lambda:)?(?:[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d:)?(?:\d{12}:)?(?:function:)?"
    r"([a-zA-Z0-9_.-]+)(?::(\$LATEST|[a-zA-Z0-9_-]+))?$"
)
FUNCTION_NAME_PATTERN = (
    "(arn:(aws[a-zA-Z-]*)?:lambda:)?([a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\\d{1}:)?(\\d{12}:)?(function:)?"
    "([a-zA-Z0-9-_\\.]+)(:(\\$LATEST|[a-zA-Z0-9-_]+))?"
)
ROLE_RE = re.compile(r"^arn:(aws[a-zA-Z-]*)?:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
# Python runtimes of the service model's enum; Lambda refuses to create functions on the
# deprecated ones (InvalidParameterValueException), and any value outside the enum fails
# validation (ValidationException). The emulator runs every one on its own interpreter.
PYTHON_RUNTIMES = {f"python3.{minor}" for minor in range(6, 16)} | {"python2.7"}
BLOCKED_RUNTIMES = {"python2.7", "python3.6", "python3.7", "python3.8"}
# AWS's reserved environment variables: "Lambda was unable to configure your environment variables
# because [they] contain reserved keys" (the runtime sets these itself).
RESERVED_ENV_KEYS = frozenset({
    "_HANDLER", "_X_AMZN_TRACE_ID", "AWS_REGION", "AWS_EXECUTION_ENV", "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_LAMBDA_LOG_GROUP_NAME", "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
})
MAX_ZIP_BYTES = 50 * 1024 * 1024  # AWS's limit on a zip uploaded directly
MAX_UNZIPPED_BYTES = 262_144_000  # AWS's limit on a package's unzipped size (250 MB)
MAX_ENVIRONMENT_BYTES = 4096  # AWS's limit on a function's environment variables, measured as JSON
DEFAULT_TIMEOUT_S = 3
DEFAULT_MEMORY_MB = 128


def parse_name(raw: str) -> tuple[str, str | None]:
    """(bare function name, qualifier or None) of a name, ARN or partial ARN.

    A value outside the model's pattern is a ValidationException, as AWS answers it
    (a name with a space, a slash, ...).
    """
    m = FULL_NAME_RE.match(raw)
    if not m or len(raw) > 256:
        raise errors.validation(
            f"1 validation error detected: Value '{raw}' at 'functionName' failed to satisfy "
            f"constraint: Member must satisfy regular expression pattern: {FUNCTION_NAME_PATTERN}"
        )
    return m.group(1), m.group(2)


def resolve_name(raw: str) -> str:
    """The bare function name of a name, ARN or partial ARN; raises if malformed."""
    return parse_name(raw)[0]


def decode_zip(b64: Any) -> bytes:
    """The zip bytes of a `ZipFile` blob, checked to be a readable zip archive."""
    if not isinstance(b64, str):
        raise errors.invalid_parameter("Code.ZipFile must be a base64-encoded zip archive")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise errors.invalid_parameter(f"Code.ZipFile is not valid base64: {e}") from None
    if len(data) > MAX_ZIP_BYTES:
        raise errors.LambdaError(
            "RequestEntityTooLargeException", 413,
            f"Zipped size must be smaller than {MAX_ZIP_BYTES} bytes",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            # Before reading a byte: a small zip of zeros unpacks to many GB (testzip then
            # blocked the event loop for minutes and activation filled the disk). A member
            # whose real data is longer than it declares fails its CRC check in testzip.
            unzipped = sum(info.file_size for info in zf.infolist())
            if unzipped > MAX_UNZIPPED_BYTES:
                raise errors.invalid_parameter(
                    f"Unzipped size must be smaller than {MAX_UNZIPPED_BYTES} bytes (this package unzips to {unzipped})"
                )
            bad = zf.testzip()
    # zlib.error: corrupt deflate data; NotImplementedError: an unsupported compression
    # method; RuntimeError: an encrypted member. All were 500 ServiceExceptions.
    except (zipfile.BadZipFile, ValueError, EOFError, zlib.error, NotImplementedError, RuntimeError):
        bad = "archive"
    if bad is not None:
        raise errors.invalid_parameter(
            "Could not unzip uploaded file. Please check your file, then try to upload again."
        )
    return data


def int_param(body: dict, key: str, default: int, lo: int, hi: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise errors.invalid_parameter(
            f"1 validation error detected: Value '{value}' at '{key[0].lower() + key[1:]}' "
            f"failed to satisfy constraint: Member must be an integer between {lo} and {hi}"
        )
    return value


# Dotted Python names, the module optionally in subdirectories (`src/app.handler`, which
# Lambda's Python runtime imports as `src.app`); no `..`, no absolute paths.
HANDLER_RE = re.compile(r"^[A-Za-z_]\w*(/[A-Za-z_]\w*)*(\.[A-Za-z_]\w*)+$")


def handler_param(handler: object) -> str:
    if isinstance(handler, str) and (len(handler) > 128 or re.search(r"\s", handler)):
        raise errors.validation(
            f"1 validation error detected: Value '{handler}' at 'handler' failed to satisfy constraint: "
            "Member must satisfy regular expression pattern: [^\\s]+ and have length less than or equal to 128")
    if not isinstance(handler, str) or not HANDLER_RE.match(handler):
        raise errors.invalid_parameter(f"Handler must be `module.function`, e.g. `app.handler`, got {handler!r}")
    return handler


def runtime_param(runtime: object) -> str:
    if not isinstance(runtime, str) or not runtime.startswith("python"):
        # A runtime AWS has (nodejs20.x, ...) that this emulator cannot run.
        raise errors.invalid_parameter(f"Runtime {runtime!r}: this emulator runs Python functions only (python3.x)")
    if runtime not in PYTHON_RUNTIMES:
        raise errors.validation(
            f"1 validation error detected: Value '{runtime}' at 'runtime' failed to satisfy constraint: "
            f"Member must satisfy enum value set: {sorted(PYTHON_RUNTIMES)} (and the other languages' runtimes)")
    if runtime in BLOCKED_RUNTIMES:
        raise errors.invalid_parameter(
            f"The runtime parameter of {runtime} is no longer supported for creating or updating AWS Lambda "
            "functions. We recommend you use a supported runtime while creating or updating functions.")
    return runtime


def _optional_text(body: dict, key: str, ok, constraint: str) -> str:
    """An optional string parameter ("" when absent); ValidationException with the model's
    constraint when `ok(value)` fails."""
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not ok(value):
        raise errors.validation(f"1 validation error detected: Value '{value}' at '{key[0].lower() + key[1:]}' "
                                f"failed to satisfy constraint: {constraint}")
    return value


def role_param(body: dict) -> str:
    return _optional_text(body, "Role", lambda v: ROLE_RE.match(v) is not None,
                          "Member must satisfy regular expression pattern: "
                          "arn:(aws[a-zA-Z-]*)?:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+")


def description_param(body: dict) -> str:
    return _optional_text(body, "Description", lambda v: len(v) <= 256,
                          "Member must have length less than or equal to 256")


def environment_param(body: dict) -> dict[str, str]:
    environment = body.get("Environment") or {}
    env = environment.get("Variables") or {} if isinstance(environment, dict) else None
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise errors.invalid_parameter('Environment must be {"Variables": {NAME: "value", ...}}')
    reserved = sorted(k for k in env if k in RESERVED_ENV_KEYS)
    if reserved:
        raise errors.invalid_parameter(
            "Lambda was unable to configure your environment variables because the environment variables you have "
            "provided contains reserved keys that are currently not supported for modification. "
            f"Reserved keys used in this request: {','.join(reserved)}")
    bad = [k for k in env if not ENV_NAME_RE.match(k)]
    if bad:
        raise errors.invalid_parameter(
            "Environment variable names must be two or more letters, digits or _, "
            f"starting with a letter (AWS's rule), got {bad[0]!r}"
        )
    # AWS's 4 KB limit. Unchecked, a large value was accepted and then every invocation
    # failed with a 500 (a variable over 128 KB cannot be passed to a new process at all).
    size = len(json.dumps(env, separators=(",", ":")).encode())
    if size > MAX_ENVIRONMENT_BYTES:
        raise errors.invalid_parameter(
            "Lambda was unable to configure your environment variables because the environment variables "
            f"you have provided exceeded the 4KB limit ({size} bytes as JSON)."
        )
    return dict(env)
