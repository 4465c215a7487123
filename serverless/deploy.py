"""Packaging a reward module (or any handler directory) and deploying it through boto3.

`deploy` creates the function, or updates its code and configuration, and
then waits with boto3's own waiters (function_active_v2 /
function_updated_v2), so the same code deploys to the emulator and to AWS.
A module may declare its Lambda settings as top-level constants, read here
without importing it: `LAMBDA_MEMORY_MB = 512`, `LAMBDA_TIMEOUT_S = 60`.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_REGION = "us-east-1"
PLACEHOLDER_KEY = "roll-agentic-local"  # any credentials work against an emulator started without them
DEFAULT_ROLE = "arn:aws:iam::000000000000:role/roll-agentic-reward"  # the emulator's: AWS needs a real one
ROLE_ENV = "ROLL_AGENTIC_LAMBDA_ROLE"  # the execution role to create functions with on AWS
# What AWS's Python runtimes have besides the standard library (the SDK and its dependencies).
LAMBDA_RUNTIME_PACKAGES = frozenset({"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3",
                                     "six", "awslambdaric"})


@dataclass
class DeploySpec:
    name: str
    zip_bytes: bytes
    handler: str
    memory_mb: int = 256
    timeout_s: int = 30
    environment: dict[str, str] = field(default_factory=dict)
    runtime: str = "python3.11"
    # AWS refuses a role it cannot assume (InvalidParameterValueException): set $ROLL_AGENTIC_LAMBDA_ROLE
    # (or pass role) to a real execution role when deploying to AWS; the emulator takes any well-formed ARN.
    role: str = field(default_factory=lambda: os.environ.get(ROLE_ENV) or DEFAULT_ROLE)
    # Imports the zip does not hold and AWS's runtime lacks: they work here, where the emulator's
    # workers run in this environment, and fail on AWS (ImportModuleError). Said, not refused.
    missing_on_lambda: list[str] = field(default_factory=list)


def lambda_client(
    endpoint_url: str | None,
    region: str = DEFAULT_REGION,
    access_key: str | None = None,
    secret_key: str | None = None,
    read_timeout_s: float = 60.0,
    max_pool_connections: int = 10,
    max_attempts: int = 1,
) -> Any:
    """A boto3 Lambda client. Credentials: the ones given, else the emulator's own
    (`env_credentials`: an emulator started in this environment checks signatures
    with them), else boto3's usual sources, else a placeholder pair (fine for an
    emulator that checks none); `max_attempts=1` leaves retrying to the caller."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    if access_key is None:
        access_key, secret_key = env_credentials()
    if access_key is None and session.get_credentials() is None:
        access_key = secret_key = PLACEHOLDER_KEY
    config = Config(
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        read_timeout=read_timeout_s,
        connect_timeout=5,
        max_pool_connections=max_pool_connections,
        tcp_keepalive=True,
    )
    return session.client(
        "lambda", endpoint_url=endpoint_url or None, region_name=region,
        aws_access_key_id=access_key, aws_secret_access_key=secret_key, config=config,
    )


def zip_path(path: Path) -> bytes:
    """A zip of one module file (at the archive root) or of a directory's contents."""
    path = Path(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if path.is_file():
            zf.write(path, path.name)
        elif path.is_dir():
            for f in sorted(path.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                    zf.write(f, f.relative_to(path).as_posix())
        else:
            raise FileNotFoundError(f"nothing to deploy at {path}: expected a .py module or a directory")
    return buf.getvalue()


def parse_module(path: Path) -> ast.Module:
    """The module's syntax tree; a syntax error is a ValueError naming the file and line.

    What the CLI prints in one line: a SyntaxError from ast.parse carried no file name
    ("<unknown>") and reached the user as a traceback.
    """
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as e:
        where = f"{path}, line {e.lineno}" if e.lineno else str(path)
        raise ValueError(f"{where}: {e.msg} (a syntax error: fix it before deploying)") from None


def module_settings(path: Path) -> dict[str, int]:
    """LAMBDA_MEMORY_MB / LAMBDA_TIMEOUT_S constants declared at a module's top level."""
    path = Path(path)
    return _settings_in(parse_module(path)) if path.is_file() else {}


def _settings_in(tree: ast.Module) -> dict[str, int]:
    out: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            key = node.targets[0].id
            if key in ("LAMBDA_MEMORY_MB", "LAMBDA_TIMEOUT_S") and isinstance(node.value, ast.Constant):
                out[key] = int(node.value.value)
    return out


def missing_on_lambda(path: Path) -> list[str]:
    """Top-level packages a one-file module imports that neither the standard library nor
    AWS's Python runtime has (a folder may bring its own: not checked)."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    return _missing_imports(tree)


def _missing_imports(tree: ast.Module) -> list[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n not in sys.stdlib_module_names and n not in LAMBDA_RUNTIME_PACKAGES)


FUNCTION_PREFIX = "roll-agentic-"  # rewards/my_reward.py is deployed as roll-agentic-my_reward


def spec_for(path: Path, name: str | None = None, prefix: str = FUNCTION_PREFIX, handler: str | None = None,
             memory_mb: int | None = None, timeout_s: int | None = None) -> DeploySpec:
    """What to deploy for `rewards/<module>.py` (or a directory with `handler` given)."""
    path = Path(path)
    if not path.exists() and path.with_suffix(".py").is_file():
        path = path.with_suffix(".py")
    stem = path.stem if path.is_file() else path.name
    if handler is None and path.is_file() and not stem.isidentifier():
        # Its handler would be `my-reward.handler`, which no Python runtime can import.
        fixed = re.sub(r"\W", "_", stem)
        raise ValueError(f"{path.name} cannot be imported as a module (its handler would be {stem}.handler): "
                         f"rename it {fixed if fixed.isidentifier() else 'a Python identifier'}.py")
    tree = parse_module(path) if path.is_file() else None  # once: its settings, then its handler
    settings = _settings_in(tree) if tree is not None else {}
    handler = handler or f"{stem}.handler"
    zip_bytes = zip_path(path)
    if path.is_dir():
        _check_handler_module(path, handler, zip_bytes)
    elif tree is not None and handler.rpartition(".")[0] == stem:
        _check_handler_defined(tree, path.name, handler.rpartition(".")[2])
    return DeploySpec(
        name=name or f"{prefix}{stem}",
        zip_bytes=zip_bytes,
        handler=handler,
        # `is not None`: an explicit 0 goes to the service, which refuses it, instead of
        # silently becoming the default.
        memory_mb=memory_mb if memory_mb is not None else settings.get("LAMBDA_MEMORY_MB", 256),
        timeout_s=timeout_s if timeout_s is not None else settings.get("LAMBDA_TIMEOUT_S", 30),
        missing_on_lambda=_missing_imports(tree) if tree is not None else [],
    )


def _check_handler_defined(tree: ast.Module, file_name: str, function: str) -> None:
    """Refuses a file that binds no top-level `function`: deployed anyway, every invoke failed
    with Runtime.HandlerNotFound (training refused the same module before it started)."""
    bound = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    if function not in bound:
        raise ValueError(f"{file_name} has no function {function}(event, context), which the Lambda runtime "
                         f"calls: add `def {function}(event, context): return {{\"reward\": reward(event)}}`")


def _check_handler_module(folder: Path, handler: str, zip_bytes: bytes) -> None:
    """Refuses a handler whose module the folder's zip does not hold: deployed anyway, the
    function failed only at its first invoke (Runtime.ImportModuleError)."""
    module, _, function = handler.rpartition(".")
    if not module or not function:
        raise ValueError(f"handler {handler!r} is not module.function: pass --handler module.function "
                         f"naming a .py file in {folder}")
    base = module.replace(".", "/")
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        names = set(zf.namelist())
    if f"{base}.py" in names or f"{base}/__init__.py" in names or any(
            n.startswith(f"{base}.") and n.endswith(".so") for n in names):  # a compiled extension module
        return
    example = next((n.removesuffix(".py") for n in sorted(names) if "/" not in n and n.endswith(".py")), "app")
    raise ValueError(f"{folder} has no {base}.py for handler {handler!r}: pass --handler module.function "
                     f"naming a .py file in {folder} (e.g. --handler {example}.handler for {folder}/{example}.py)")


def deploy(client: Any, spec: DeploySpec, wait_delay_s: float = 0.2, wait_attempts: int = 300) -> dict:
    """Creates or updates the function and waits until it is Active; returns its configuration."""
    waiter_cfg = {"Delay": wait_delay_s, "MaxAttempts": wait_attempts}
    try:
        current = client.get_function(FunctionName=spec.name)["Configuration"]
    except client.exceptions.ResourceNotFoundException:
        current = None
    if current is None:
        client.create_function(
            FunctionName=spec.name, Runtime=spec.runtime, Role=spec.role, Handler=spec.handler,
            Code={"ZipFile": spec.zip_bytes}, Timeout=spec.timeout_s, MemorySize=spec.memory_mb,
            Environment={"Variables": spec.environment},
        )
        client.get_waiter("function_active_v2").wait(FunctionName=spec.name, WaiterConfig=waiter_cfg)
    else:
        client.update_function_code(FunctionName=spec.name, ZipFile=spec.zip_bytes)
        client.get_waiter("function_updated_v2").wait(FunctionName=spec.name, WaiterConfig=waiter_cfg)
        wanted = {"Handler": spec.handler, "Timeout": spec.timeout_s, "MemorySize": spec.memory_mb}
        if any(current.get(k) != v for k, v in wanted.items()) or (current.get("Environment") or {}).get("Variables", {}) != spec.environment:
            client.update_function_configuration(FunctionName=spec.name, Environment={"Variables": spec.environment}, **wanted)
            client.get_waiter("function_updated_v2").wait(FunctionName=spec.name, WaiterConfig=waiter_cfg)
    return client.get_function_configuration(FunctionName=spec.name)


def env_credentials() -> tuple[str | None, str | None]:
    """The emulator's own credentials from the environment, if set (both or neither)."""
    ak = os.environ.get("ROLL_AGENTIC_SERVERLESS_ACCESS_KEY")
    sk = os.environ.get("ROLL_AGENTIC_SERVERLESS_SECRET_KEY")
    return (ak, sk) if ak and sk else (None, None)
