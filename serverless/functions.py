"""The registry of deployed functions and its persistence in the state dir.

Layout of `<state_dir>/functions/<name>/`: `config.json` (the configuration
AWS would show), `code.zip` (the package as uploaded) and `code-<sha>/` (the
package unpacked, the directory a worker imports from). Everything is written
to a temporary file and renamed, so a crash mid-write leaves the old version.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import time
import uuid
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serverless import errors

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ENV_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]+$")  # AWS's pattern for variable names
# A function named by ARN or partial ARN, optionally with a version qualifier.
ARN_RE = re.compile(r"^(?:arn:aws[a-z-]*:lambda:[a-z0-9-]+:)?\d{12}:function:([a-zA-Z0-9_-]{1,64})(?::[\w$-]+)?$")
MAX_ZIP_BYTES = 50 * 1024 * 1024  # AWS's limit on a zip uploaded directly
MAX_UNZIPPED_BYTES = 262_144_000  # AWS's limit on a package's unzipped size (250 MB)
MAX_ENVIRONMENT_BYTES = 4096  # AWS's limit on a function's environment variables, measured as JSON
DEFAULT_TIMEOUT_S = 3
DEFAULT_MEMORY_MB = 128


@dataclass
class FunctionRecord:
    name: str
    handler: str
    runtime: str = "python3.11"
    role: str = ""
    description: str = ""
    timeout_s: int = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    environment: dict[str, str] = field(default_factory=dict)
    code_sha256: str = ""  # base64 of the digest, as AWS shows it
    code_size: int = 0
    last_modified: str = ""
    revision_id: str = ""
    state: str = "Pending"  # Pending -> Active | Failed
    last_update_status: str = "InProgress"  # InProgress -> Successful | Failed
    reserved_concurrency: int | None = None

    @property
    def code_tag(self) -> str:
        """A filesystem-safe name of this code version (its directory is `code-<tag>`)."""
        return base64.b64decode(self.code_sha256).hex()[:16]

    @property
    def environment_tag(self) -> str:
        """What an execution environment was started with: code, handler, memory, variables.

        Environments are reused only while it stands. Tagging them with the
        code alone let one busy during an UpdateFunctionConfiguration go back
        to the idle pool and serve the old variables until its keep-alive ran out.
        """
        started_with = json.dumps([self.handler, self.memory_mb, self.environment], sort_keys=True)
        return f"{self.code_tag}-{hashlib.sha256(started_with.encode()).hexdigest()[:8]}"

    def configuration(self, region: str) -> dict[str, Any]:
        """The FunctionConfiguration shape of the service model."""
        return {
            "FunctionName": self.name,
            "FunctionArn": errors.function_arn(self.name, region),
            "Runtime": self.runtime,
            "Role": self.role,
            "Handler": self.handler,
            "CodeSize": self.code_size,
            "Description": self.description,
            "Timeout": self.timeout_s,
            "MemorySize": self.memory_mb,
            "LastModified": self.last_modified,
            "CodeSha256": self.code_sha256,
            "Version": "$LATEST",
            "Environment": {"Variables": dict(self.environment)},
            "RevisionId": self.revision_id,
            "State": self.state,
            "LastUpdateStatus": self.last_update_status,
            "PackageType": "Zip",
            "Architectures": ["x86_64"],
            "EphemeralStorage": {"Size": 512},
        }


def resolve_name(raw: str) -> str:
    """The bare function name of a name, ARN or partial ARN; raises if malformed."""
    if NAME_RE.match(raw):
        return raw
    m = ARN_RE.match(raw)
    if m:
        return m.group(1)
    raise errors.invalid_parameter(
        f"1 validation error detected: Value '{raw}' at 'functionName' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: "
        "(arn:aws:lambda:)?([a-z]{2}-[a-z]+-\\d{1}:)?(\\d{12}:)?(function:)?([a-zA-Z0-9-_]+)"
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())


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


def _int_param(body: dict, key: str, default: int, lo: int, hi: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise errors.invalid_parameter(
            f"1 validation error detected: Value '{value}' at '{key[0].lower() + key[1:]}' "
            f"failed to satisfy constraint: Member must be an integer between {lo} and {hi}"
        )
    return value


HANDLER_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")  # dotted Python names: no paths


def _handler(handler: object) -> str:
    if not isinstance(handler, str) or not HANDLER_RE.match(handler):
        raise errors.invalid_parameter(f"Handler must be `module.function`, e.g. `app.handler`, got {handler!r}")
    return handler


def _environment(body: dict) -> dict[str, str]:
    environment = body.get("Environment") or {}
    env = environment.get("Variables") or {} if isinstance(environment, dict) else None
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise errors.invalid_parameter('Environment must be {"Variables": {NAME: "value", ...}}')
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


class FunctionStore:
    """Deployed functions, kept in memory and mirrored to `<state_dir>/functions`."""

    def __init__(self, state_dir: Path, region: str) -> None:
        # Absolute: execution environments are processes whose cwd is not ours.
        self.root = Path(state_dir).resolve() / "functions"
        self.root.mkdir(parents=True, exist_ok=True)
        self.region = region
        self.functions: dict[str, FunctionRecord] = {}
        self._load()

    def _load(self) -> None:
        fields = {f.name for f in dataclasses.fields(FunctionRecord)}
        for cfg_path in sorted(self.root.glob("*/config.json")):
            # A half-written or foreign file (config, code.zip or digest): skip that
            # function rather than refuse to start.
            try:
                raw = json.loads(cfg_path.read_text())
                rec = FunctionRecord(**{k: v for k, v in raw.items() if k in fields})
                if not self.code_dir(rec).is_dir():
                    zip_path = cfg_path.parent / "code.zip"
                    if not zip_path.is_file():
                        continue
                    self._unpack(rec, zip_path.read_bytes())
            except (OSError, ValueError, TypeError, binascii.Error, zipfile.BadZipFile):
                continue
            self.prune_code(rec, set())  # nothing runs yet: only its current code stays
            rec.state, rec.last_update_status = "Active", "Successful"
            self.functions[rec.name] = rec

    # -- lookups ------------------------------------------------------------

    def get(self, raw_name: str) -> FunctionRecord:
        name = resolve_name(raw_name)
        rec = self.functions.get(name)
        if rec is None:
            raise errors.not_found(name, self.region)
        return rec

    def code_dir(self, rec: FunctionRecord) -> Path:
        return self.root / rec.name / f"code-{rec.code_tag}"

    def page(self, marker: str | None, max_items: int) -> tuple[list[FunctionRecord], str | None]:
        """One page of functions in name order; the marker is the first name of the next page."""
        names = sorted(self.functions)
        start = 0
        if marker:
            try:
                first = base64.urlsafe_b64decode(marker.encode()).decode()
            except (binascii.Error, ValueError, UnicodeDecodeError):
                raise errors.invalid_parameter(f"Invalid Marker: {marker}") from None
            start = next((i for i, n in enumerate(names) if n >= first), len(names))
        chunk = names[start : start + max_items]
        rest = names[start + max_items : start + max_items + 1]
        nxt = base64.urlsafe_b64encode(rest[0].encode()).decode() if rest else None
        return [self.functions[n] for n in chunk], nxt

    # -- changes ------------------------------------------------------------

    def create(self, body: dict) -> FunctionRecord:
        name = body.get("FunctionName")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise errors.invalid_parameter(f"FunctionName must match [a-zA-Z0-9_-]{{1,64}}, got {name!r}")
        if name in self.functions:
            raise errors.conflict(f"Function already exist: {name}")
        handler = _handler(body.get("Handler"))
        runtime = body.get("Runtime") or "python3.11"
        if not isinstance(runtime, str) or not runtime.startswith("python3"):
            raise errors.invalid_parameter(
                f"Runtime {runtime!r}: this emulator runs Python functions only (python3.x)")
        code = body.get("Code") or {}
        if not isinstance(code, dict) or "ZipFile" not in code:
            raise errors.invalid_parameter("Code.ZipFile is required: this emulator takes zip uploads only")
        data = decode_zip(code["ZipFile"])
        rec = FunctionRecord(
            name=name,
            handler=handler,
            runtime=runtime,
            role=str(body.get("Role") or ""),
            description=str(body.get("Description") or ""),
            timeout_s=_int_param(body, "Timeout", DEFAULT_TIMEOUT_S, 1, 900),
            memory_mb=_int_param(body, "MemorySize", DEFAULT_MEMORY_MB, 128, 10240),
            environment=_environment(body),
        )
        self._set_code(rec, data)
        self.functions[name] = rec
        self._save(rec, data)
        return rec

    def update_code(self, rec: FunctionRecord, body: dict) -> FunctionRecord:
        if "ZipFile" not in body:
            raise errors.invalid_parameter("ZipFile is required: this emulator takes zip uploads only")
        want = body.get("RevisionId")
        if want and want != rec.revision_id:
            raise errors.LambdaError(
                "PreconditionFailedException", 412,
                "The Revision Id provided does not match the latest Revision Id.",
            )
        data = decode_zip(body["ZipFile"])
        self._set_code(rec, data)
        rec.last_update_status = "InProgress"
        self._save(rec, data)
        return rec

    def update_configuration(self, rec: FunctionRecord, body: dict) -> FunctionRecord:
        """UpdateFunctionConfiguration: handler, timeout, memory, environment, description."""
        # Every field is checked before any is applied: a valid Handler next to an invalid
        # Timeout was applied (new invocations ran it) although the request was refused.
        handler = _handler(body["Handler"]) if "Handler" in body else rec.handler
        timeout_s = _int_param(body, "Timeout", rec.timeout_s, 1, 900) if "Timeout" in body else rec.timeout_s
        memory_mb = _int_param(body, "MemorySize", rec.memory_mb, 128, 10240) if "MemorySize" in body else rec.memory_mb
        environment = _environment(body) if "Environment" in body else rec.environment
        rec.handler, rec.timeout_s, rec.memory_mb, rec.environment = handler, timeout_s, memory_mb, environment
        if "Description" in body:
            rec.description = str(body["Description"] or "")
        rec.last_modified = _now()
        rec.revision_id = str(uuid.uuid4())
        self._write_config(rec)
        return rec

    def activate(self, rec: FunctionRecord) -> None:
        """Unpacks the code (the Pending -> Active step) and persists the new state."""
        zip_path = self.root / rec.name / "code.zip"
        try:
            self._unpack(rec, zip_path.read_bytes())
            rec.state, rec.last_update_status = "Active", "Successful"
        except (OSError, zipfile.BadZipFile):
            rec.state, rec.last_update_status = "Failed", "Failed"
        self._write_config(rec)

    def set_concurrency(self, rec: FunctionRecord, reserved: int | None) -> None:
        rec.reserved_concurrency = reserved
        self._write_config(rec)

    def delete(self, rec: FunctionRecord) -> None:
        self.functions.pop(rec.name, None)
        shutil.rmtree(self.root / rec.name, ignore_errors=True)

    # -- files --------------------------------------------------------------

    def _set_code(self, rec: FunctionRecord, data: bytes) -> None:
        rec.code_sha256 = base64.b64encode(hashlib.sha256(data).digest()).decode()
        rec.code_size = len(data)
        rec.last_modified = _now()
        rec.revision_id = str(uuid.uuid4())

    def _unpack(self, rec: FunctionRecord, data: bytes) -> None:
        target = self.code_dir(rec)
        if target.is_dir():
            return
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            zf.extractall(tmp)  # extractall drops absolute and `..` member paths
        os.replace(tmp, target)

    def prune_code(self, rec: FunctionRecord, in_use: set[str]) -> None:
        """Removes the code directories of `rec` that neither it nor a live environment uses.

        An environment started on older code imports from its directory for
        as long as it runs (a lazy `import helper` in the handler, or a cold
        start in the middle of an update): removing it at once broke those.
        """
        keep = {f"code-{rec.code_tag}"} | {f"code-{tag}" for tag in in_use}
        for old in (self.root / rec.name).glob("code-*"):
            if old.name not in keep and old.is_dir() and ".tmp" not in old.name:
                shutil.rmtree(old, ignore_errors=True)

    def _save(self, rec: FunctionRecord, data: bytes) -> None:
        d = self.root / rec.name
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / "code.zip.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, d / "code.zip")
        self._write_config(rec)

    def _write_config(self, rec: FunctionRecord) -> None:
        d = self.root / rec.name
        if not d.is_dir():
            return  # deleted meanwhile
        tmp = d / "config.json.tmp"
        tmp.write_text(json.dumps(dataclasses.asdict(rec), indent=1))
        os.replace(tmp, d / "config.json")
