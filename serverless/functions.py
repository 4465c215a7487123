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
import shutil
import time
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serverless import errors
from serverless.function_params import (
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    FUNCTION_NAME_PATTERN,
    decode_zip,
    description_param,
    environment_param,
    handler_param,
    int_param,
    parse_name,
    role_param,
    runtime_param,
)


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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())


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

    def get(self, raw_name: str, qualifier: str | None = None) -> FunctionRecord:
        """The function `raw_name` names; a version or alias (in the name or as `qualifier`)
        other than $LATEST is a ResourceNotFoundException, as AWS answers one that does not
        exist: this emulator has no versions or aliases. Ignoring it made a DeleteFunction of
        one version delete the whole function."""
        name, in_name = parse_name(raw_name)
        if in_name is not None and qualifier is not None and in_name != qualifier:
            raise errors.invalid_parameter("The derived qualifier from the function name does not match the specified qualifier.")
        qualifier = qualifier if qualifier is not None else in_name
        rec = self.functions.get(name)
        if rec is None:
            raise errors.not_found(name, self.region)
        if qualifier is not None and qualifier != "$LATEST":
            raise errors.LambdaError(
                "ResourceNotFoundException", 404,
                f"Function not found: {errors.function_arn(name, self.region)}:{qualifier}"
                " (this emulator serves $LATEST only: versions and aliases are not emulated)")
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
        raw_name = body.get("FunctionName")
        if not isinstance(raw_name, str):
            raise errors.validation("1 validation error detected: Value null at 'functionName' failed to satisfy constraint: Member must not be null")
        name, qualifier = parse_name(raw_name)
        if qualifier is not None or "." in name:
            raise errors.validation(
                f"1 validation error detected: Value '{raw_name}' at 'functionName' failed to satisfy constraint: "
                "Member must satisfy regular expression pattern: " + FUNCTION_NAME_PATTERN)
        if len(name) > 64:
            raise errors.invalid_parameter(
                f"1 validation error detected: Value '{name}' at 'functionName' failed to satisfy constraint: "
                "Member must have length less than or equal to 64")
        if name in self.functions:
            raise errors.conflict(f"Function already exist: {name}")
        if body.get("Runtime") is None or body.get("Handler") is None:
            # AWS has no default runtime: a package without one is refused, not run on python3.11
            raise errors.invalid_parameter("Runtime and Handler are mandatory parameters for functions created with deployment packages.")
        handler = handler_param(body.get("Handler"))
        runtime = runtime_param(body.get("Runtime"))
        role_param(body)
        description_param(body)
        code = body.get("Code") or {}
        if not isinstance(code, dict) or "ZipFile" not in code:
            raise errors.invalid_parameter("Code.ZipFile is required: this emulator takes zip uploads only")
        data = decode_zip(code["ZipFile"])
        rec = FunctionRecord(
            name=name,
            handler=handler,
            runtime=runtime,
            role=role_param(body),
            description=description_param(body),
            timeout_s=int_param(body, "Timeout", DEFAULT_TIMEOUT_S, 1, 900),
            memory_mb=int_param(body, "MemorySize", DEFAULT_MEMORY_MB, 128, 10240),
            environment=environment_param(body),
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
        want = body.get("RevisionId")
        if want and want != rec.revision_id:
            raise errors.LambdaError(
                "PreconditionFailedException", 412,
                "The Revision Id provided does not match the latest Revision Id.",
            )
        handler = handler_param(body["Handler"]) if "Handler" in body else rec.handler
        timeout_s = int_param(body, "Timeout", rec.timeout_s, 1, 900) if "Timeout" in body else rec.timeout_s
        memory_mb = int_param(body, "MemorySize", rec.memory_mb, 128, 10240) if "MemorySize" in body else rec.memory_mb
        environment = environment_param(body) if "Environment" in body else rec.environment
        description = description_param(body) if "Description" in body else rec.description
        role = role_param(body) or rec.role
        rec.handler, rec.timeout_s, rec.memory_mb, rec.environment = handler, timeout_s, memory_mb, environment
        rec.description, rec.role = description, role
        rec.last_update_status = "InProgress"  # Successful a moment later (the server's settle step)
        rec.last_modified = _now()
        rec.revision_id = str(uuid.uuid4())
        self._write_config(rec)
        return rec

    def settle(self, rec: FunctionRecord) -> None:
        """InProgress -> Successful after a configuration update."""
        if rec.last_update_status == "InProgress":
            rec.last_update_status = "Successful"
            self._write_config(rec)

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
