"""Packaging a reward module (or any handler directory) and deploying it through boto3.

`deploy` creates the function, or updates its code and configuration, and
then waits with boto3's own waiters (function_active_v2 /
function_updated_v2), so the same code deploys to the emulator and to AWS.
A module may declare its Lambda settings as top-level literal constants, read
here without importing it: `LAMBDA_MEMORY_MB = 512` (128-10240), `LAMBDA_TIMEOUT_S = 60`
(1-900) and `LAMBDA_ENVIRONMENT = {"NAME": "value"}` (the function's environment
variables). Without LAMBDA_ENVIRONMENT a redeploy leaves the function's variables as
they are (set by hand or by another tool); with it, they become exactly those.
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
    # None: the module declares no LAMBDA_ENVIRONMENT, so a redeploy leaves the function's variables
    # alone (sending {} wiped ones set by hand, e.g. reward_model.py's REWARD_MODEL_WEIGHTS).
    environment: dict[str, str] | None = None
    runtime: str = "python3.11"
    # AWS refuses a role it cannot assume (InvalidParameterValueException): set $ROLL_AGENTIC_LAMBDA_ROLE
    # (or pass role) to a real execution role when deploying to AWS; the emulator takes any well-formed ARN.
    role: str = field(default_factory=lambda: os.environ.get(ROLE_ENV) or DEFAULT_ROLE)
    # Imports the zip does not hold and AWS's runtime lacks: installed here, they work here (the
    # emulator's workers run in this environment) and fail on AWS (ImportModuleError). Said, not
    # refused; an import of the module's own folder is refused (local_import_problem).
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


SETTINGS = ("LAMBDA_MEMORY_MB", "LAMBDA_TIMEOUT_S", "LAMBDA_ENVIRONMENT")
_NOT_LITERAL = object()  # a setting assigned an expression: refused by spec_for, never guessed at


def module_settings(path: Path) -> dict[str, object]:
    """The LAMBDA_* settings (SETTINGS) a module assigns at its top level, unchecked (spec_for checks them)."""
    path = Path(path)
    return _settings_in(parse_module(path)) if path.is_file() else {}


def _settings_in(tree: ast.Module) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target, node.value  # `LAMBDA_ENVIRONMENT: dict[str, str] = {...}`
        else:
            continue
        if target.id in SETTINGS:
            try:
                out[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                out[target.id] = _NOT_LITERAL
    return out


def _checked_settings(settings: dict[str, object], file_name: str) -> dict[str, object]:
    """The settings, each checked against what Lambda accepts: a ValueError naming the file and the
    constant before any API call. Unchecked, `LAMBDA_TIMEOUT_S = 1800` was refused only by the
    configuration update, after the new code was live, and `LAMBDA_MEMORY_MB = None` was a TypeError."""
    for key, (low, high, unit) in {"LAMBDA_MEMORY_MB": (128, 10240, "MB"), "LAMBDA_TIMEOUT_S": (1, 900, "s")}.items():
        value = settings.get(key)
        # bool is an int subclass: `LAMBDA_TIMEOUT_S = True` is a mistake, not a 1 s timeout
        if key in settings and (type(value) is not int or not low <= value <= high):
            shown = "an expression" if value is _NOT_LITERAL else repr(value)
            raise ValueError(f"{file_name}: {key} = {shown}: expected a literal int from {low} to {high} ({unit}), "
                             "what AWS Lambda accepts")
    env = settings.get("LAMBDA_ENVIRONMENT", {})
    if "LAMBDA_ENVIRONMENT" in settings and (not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]+", k) for k, v in env.items())):
        shown = "an expression" if env is _NOT_LITERAL else repr(env)[:80]
        raise ValueError(f"{file_name}: LAMBDA_ENVIRONMENT = {shown}: expected a literal dict of str to str, "
                         "each name a letter then one or more letters, digits or _ (e.g. {\"MODEL_PATH\": \"/opt/model.pt\"})")
    return settings


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


def local_import_problem(path: Path, tree: ast.Module | None = None, package: str = "") -> str:
    """Why a module deployed as one file cannot import what it imports, or "": a relative import,
    or one of its own package (or of a module next to it), names code the one-file zip does not
    hold. Deployed anyway, every invoke failed with Runtime.ImportModuleError on AWS. `package`: the
    package it is imported from where that is known (`rewards` may span folders: rewards.__path__)."""
    path = Path(path)
    if tree is None:
        tree = parse_module(path)
    own = _own_names(path) | ({package} if package else set())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    for node in sorted(imports, key=lambda n: n.lineno):  # the first in the file, not in the walk
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            shown = f"from {'.' * node.level}{node.module or ''} import ..."
        else:
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            local = [m for m in modules if m.split(".")[0] in own]
            if not local:
                continue
            shown = f"import {local[0]}" if isinstance(node, ast.Import) else f"from {local[0]} import ..."
        return (f"{path.name} line {node.lineno}: `{shown}` imports code of its own folder, which a one-file "
                f"deploy does not upload (every invoke would fail with Runtime.ImportModuleError): inline that "
                f"code into {path.name}, or deploy a folder holding both with `--handler "
                f"{path.stem}.handler` (its modules then import each other by their plain names)")
    return ""


def _own_names(path: Path) -> set[str]:
    """Top-level names that resolve to the module's own folder: its package's outermost one
    (walking up through __init__.py files) and the modules and packages next to it."""
    folder = path.resolve().parent
    top = folder
    while (top / "__init__.py").is_file() and (top.parent / "__init__.py").is_file():
        top = top.parent
    names = {top.name} if (folder / "__init__.py").is_file() else set()
    try:
        for entry in folder.iterdir():
            if entry != path.resolve() and (entry.suffix == ".py" or (entry / "__init__.py").is_file()):
                names.add(entry.stem if entry.suffix == ".py" else entry.name)
        names -= sys.stdlib_module_names  # a `json.py` beside it: an import of json means the standard one
    except OSError:
        pass
    return {n for n in names if n.isidentifier()}


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
    settings = _checked_settings(_settings_in(tree), path.name) if tree is not None else {}
    problem = local_import_problem(path, tree) if tree is not None else ""
    if problem:
        raise ValueError(problem)
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
        environment=settings.get("LAMBDA_ENVIRONMENT"),
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
            Environment={"Variables": spec.environment or {}},
        )
        client.get_waiter("function_active_v2").wait(FunctionName=spec.name, WaiterConfig=waiter_cfg)
        return client.get_function_configuration(FunctionName=spec.name)
    wanted: dict[str, Any] = {"Handler": spec.handler, "Timeout": spec.timeout_s, "MemorySize": spec.memory_mb}
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    variables = (current.get("Environment") or {}).get("Variables", {})
    if spec.environment is not None and variables != spec.environment:
        changed["Environment"] = {"Variables": spec.environment}
    # Code first: a new handler may name a module only the new code has. What the service could
    # refuse of the configuration, spec_for checked before this; anything else refused now leaves
    # the new code live with the previous settings, and says so.
    client.update_function_code(FunctionName=spec.name, ZipFile=spec.zip_bytes)
    client.get_waiter("function_updated_v2").wait(FunctionName=spec.name, WaiterConfig=waiter_cfg)
    if changed:
        _update_configuration(client, spec.name, changed, current, waiter_cfg)
    return client.get_function_configuration(FunctionName=spec.name)


def _update_configuration(client: Any, name: str, changed: dict[str, Any], current: dict,
                          waiter_cfg: dict) -> None:
    """UpdateFunctionConfiguration after the code update; refused, a ClientError (what both the CLI and
    a training start report in one line) saying that the new code runs with the previous settings."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.update_function_configuration(FunctionName=name, **changed)
        client.get_waiter("function_updated_v2").wait(FunctionName=name, WaiterConfig=waiter_cfg)
    except (ClientError, BotoCoreError) as err:
        error = err.response.get("Error", {}) if isinstance(err, ClientError) else {}
        kept = [f"{k} {current.get(k)!r}" for k in changed if k != "Environment"]
        kept += ["its environment variables"] if "Environment" in changed else []
        message = (f"{error.get('Message', err)}; the new code of {name} is live, but with its previous "
                   f"settings ({', '.join(kept)}): fix what was refused and deploy again")
        raise ClientError({"Error": {"Code": error.get("Code", type(err).__name__), "Message": message}},
                          "UpdateFunctionConfiguration") from err


def env_credentials() -> tuple[str | None, str | None]:
    """The emulator's own credentials from the environment, if set (both or neither)."""
    ak = os.environ.get("ROLL_AGENTIC_SERVERLESS_ACCESS_KEY")
    sk = os.environ.get("ROLL_AGENTIC_SERVERLESS_SECRET_KEY")
    return (ak, sk) if ak and sk else (None, None)


def missing_imports_warning(what: str, missing: list[str]) -> str:
    """The warning (no "warning:" prefix) for imports AWS's runtime lacks. "It runs here" only of installed packages
    (the emulator's workers use this environment): one installed nowhere fails here too."""
    import importlib.metadata

    installed = importlib.metadata.packages_distributions()
    here = [m for m in missing if m in installed]
    nowhere = [m for m in missing if m not in installed]
    fix = "deploy a folder holding those packages, or use the standard library"
    if not nowhere:
        return (f"{what} imports {', '.join(here)}, which AWS Lambda's Python runtime does not have: "
                f"it runs here (the emulator's workers use this environment) but fails on AWS; {fix}")
    also = f" (and {', '.join(here)}, installed here but not on AWS)" if here else ""
    return (f"{what} imports {', '.join(nowhere)}{also}, which neither this environment nor AWS "
            f"Lambda's Python runtime has: every invoke fails, here and on AWS; {fix}")
