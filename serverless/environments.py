"""Execution environments: one worker process each, kept warm and reused.

An environment goes starting -> ready <-> running -> stopped. A ready one is
reused for the next invocation of the same code version (a warm start); a
new one pays the process start and the handler's import (a cold start). The
pool evicts environments idle for longer than the keep-alive, replaces one
whose invocation timed out (its process tree is killed: the worker and
whatever it started, see proctree.py), and drops those started with older code or an older
configuration when the function changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from serverless import logfiles, proctree
from serverless.functions import FunctionRecord

_HEADER = struct.Struct(">I")
# What a worker keeps of the emulator's own environment: what Lambda's runtime sets as well (PATH,
# LANG, TZ, LD_LIBRARY_PATH) and what this interpreter may need to start (PYTHON*, HOME, a temp
# folder). Inheriting all of it, a variable the function reads but was never given (a shell's
# `export REWARD_MODEL_WEIGHTS=...`) worked here and was missing on AWS, where nothing said so.
HOST_KEEP = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP", "LD_LIBRARY_PATH"})
HOST_KEEP_PREFIXES = ("LC_", "PYTHON")
PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
INIT_LIMIT_S = 10.0  # Lambda's limit on the init phase, on top of the function timeout
MIN_HANDLER_S = 0.1  # what a handler gets at least after an init that used up its allowance


def handler_timeout_s(timeout_s: float, init_ms: float | None) -> float:
    """How long the handler may run: its Timeout, less what a cold start's init (`init_ms`;
    None when warm) took beyond INIT_LIMIT_S.

    An init past its own limit runs on the function's time: AWS caps a cold invocation
    at about Timeout + 10 s in all. Giving the handler a full Timeout after a slow init
    made it up to 2 x Timeout + 10 s, past the client's read timeout (Timeout + 15 s),
    which then retried an invocation still running.
    """
    over = 0.0 if init_ms is None else max(0.0, init_ms / 1000.0 - INIT_LIMIT_S)
    return max(MIN_HANDLER_S, timeout_s - over)


class InitError(Exception):
    """The handler could not be loaded; `error` is Lambda's error object for the caller."""

    def __init__(self, error: dict, init_ms: float) -> None:
        super().__init__(error.get("errorMessage", "init failed"))
        self.error = error
        self.init_ms = init_ms


class WorkerDied(Exception):
    """The worker process exited in the middle of an invocation."""


class ProtocolError(Exception):
    """The worker's reply was not a frame of the protocol (worker.py): the environment is stopped."""


@dataclass(eq=False)  # identity semantics: environments live in sets
class Environment:
    function: str
    tag: str  # FunctionRecord.environment_tag it was started with
    code_tag: str  # its code directory, kept while it lives
    proc: asyncio.subprocess.Process
    init_ms: float = 0.0
    state: str = "starting"  # starting -> ready <-> running -> stopped
    last_used: float = field(default_factory=time.monotonic)
    invocations: int = 0

    async def invoke(self, msg: dict, timeout_s: float) -> dict:
        """Sends one invocation and waits for its reply; raises TimeoutError, WorkerDied or
        ProtocolError, and stops the environment on any of them."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.state = "running"
        data = json.dumps(msg).encode()
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            reply = await asyncio.wait_for(self._read(), timeout_s)
        except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as e:
            self.kill()
            raise WorkerDied(f"the execution environment exited (code {self.proc.returncode})") from e
        except ValueError as e:  # a frame that is not JSON: what follows it is out of step too
            self.kill()
            raise ProtocolError(f"the execution environment sent a malformed reply ({type(e).__name__}: {e})") from e
        except BaseException:
            # Timed out or cancelled: its reply would arrive for the next request, so this worker
            # is done. Anything else unforeseen: never hand this worker another request either.
            self.kill()
            raise
        if not isinstance(reply, dict):
            self.kill()
            raise ProtocolError(f"the execution environment sent a reply that is not an object: {type(reply).__name__}")
        self.invocations += 1
        self.state = "ready"
        self.last_used = time.monotonic()
        return reply

    async def _read(self) -> dict:
        assert self.proc.stdout is not None
        head = await self.proc.stdout.readexactly(4)
        return json.loads(await self.proc.stdout.readexactly(_HEADER.unpack(head)[0]))

    def kill(self) -> None:
        """Stops the worker and every process it started (Lambda tears down the whole sandbox).

        Its process group was not enough: a process the handler started in a
        session of its own survived, re-parented to init. The worker is a child
        subreaper (worker.py), so its whole tree is found under it and killed.
        """
        self.state = "stopped"
        proctree.kill_tree(self.proc.pid, reaped=self.proc.returncode is not None)

    @property
    def alive(self) -> bool:
        return self.state != "stopped" and self.proc.returncode is None


def host_environment(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """The part of the emulator's environment a worker starts with (HOST_KEEP); the function's
    own variables and the AWS_LAMBDA_* ones are added to it."""
    return {k: v for k, v in environ.items() if k in HOST_KEEP or k.startswith(HOST_KEEP_PREFIXES)}


class EnvironmentPool:
    """Ready environments per function, started on demand and evicted when idle."""

    def __init__(self, region: str, log_dir: Path, keep_alive_s: float = 300.0) -> None:
        self.region = region
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.keep_alive_s = keep_alive_s
        self.idle: dict[str, list[Environment]] = {}
        self.busy: set[Environment] = set()
        self._reaper: asyncio.Task | None = None
        self._waiters: set[asyncio.subprocess.Process] = set()
        self._starting: list[tuple[str, str]] = []  # (function, code tag) of environments starting

    def start_reaper(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def acquire(self, rec: FunctionRecord, code_dir: Path) -> tuple[Environment, bool]:
        """A ready environment for `rec` and whether it was a cold start."""
        stack = self.idle.get(rec.name, [])
        while stack:
            env = stack.pop()  # most recently used first: lets the others age out
            if env.alive and env.tag == rec.environment_tag:
                env.state = "running"
                self.busy.add(env)
                return env, False
            env.kill()
        env = await self._start(rec, code_dir)
        self.busy.add(env)
        return env, True

    def release(self, env: Environment, current_tag: str | None) -> None:
        """Returns an environment after an invocation; a stale (`current_tag`: the
        function's environment_tag now) or dead one is stopped."""
        self.busy.discard(env)
        if env.alive and env.tag == current_tag:
            env.state = "ready"
            self.idle.setdefault(env.function, []).append(env)
        else:
            env.kill()

    def drop_function(self, name: str, keep_tag: str | None = None) -> None:
        """Stops the idle environments of `name` (all of them, or those not on `keep_tag`)."""
        for env in self.idle.pop(name, []):
            if keep_tag is not None and env.alive and env.tag == keep_tag:
                self.idle.setdefault(name, []).append(env)
            else:
                env.kill()

    def code_in_use(self, name: str) -> set[str]:
        """The code tags that live or starting environments of `name` run from."""
        envs = [*self.idle.get(name, []), *(e for e in self.busy if e.function == name)]
        return {e.code_tag for e in envs if e.alive} | {tag for f, tag in self._starting if f == name}

    def counts(self, name: str) -> dict[str, int]:
        return {
            "ready": sum(e.alive for e in self.idle.get(name, [])),
            "running": sum(e.function == name for e in self.busy),
        }

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        envs = [e for stack in self.idle.values() for e in stack] + list(self.busy)
        self.idle.clear()
        for env in envs:
            env.kill()
        for env in envs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(env.proc.wait(), 5)

    # -- internals ------------------------------------------------------------

    async def _start(self, rec: FunctionRecord, code_dir: Path) -> Environment:
        env_vars = host_environment(os.environ)
        env_vars.setdefault("MALLOC_ARENA_MAX", "2")  # see worker.py: arenas count against RLIMIT_AS
        env_vars.update(rec.environment)
        env_vars.update(
            {
                "AWS_LAMBDA_FUNCTION_NAME": rec.name,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(rec.memory_mb),
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_EXECUTION_ENV": f"AWS_Lambda_{rec.runtime}",
                "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{rec.name}",
                "AWS_LAMBDA_LOG_STREAM_NAME": "local",
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "LAMBDA_TASK_ROOT": str(code_dir),
                "_HANDLER": rec.handler,
                "ROLL_AGENTIC_FUNCTION_ARN": f"arn:aws:lambda:{self.region}:000000000000:function:{rec.name}",
                "ROLL_AGENTIC_PROJECT_ROOT": PROJECT_ROOT,
                "PYTHONPATH": PROJECT_ROOT,  # so that `-m serverless.worker` resolves
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        t0 = time.perf_counter()
        # What it starts with, read before any await: an update meanwhile must not re-tag it.
        tag, code_tag, timeout_s, memory_mb = rec.environment_tag, rec.code_tag, rec.timeout_s, rec.memory_mb
        starting = (rec.name, code_tag)
        self._starting.append(starting)
        try:
            return await self._started(rec.name, tag, code_tag, timeout_s, memory_mb, code_dir, env_vars, t0)
        finally:
            self._starting.remove(starting)

    async def _started(self, name: str, tag: str, code_tag: str, timeout_s: int, memory_mb: int,
                       code_dir: Path, env_vars: dict[str, str], t0: float) -> Environment:
        with open(logfiles.log_path(self.log_dir, name), "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "serverless.worker",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                env=env_vars, cwd=str(code_dir), start_new_session=True,
            )
        env = Environment(function=name, tag=tag, code_tag=code_tag, proc=proc)
        try:
            return await self._initialised(env, timeout_s, memory_mb, t0)
        except BaseException:
            # Cancelled part-way (Invoker.close() cancels an Event's cold start) or failed in
            # any other way: the worker is no environment of the pool's, so nothing else stops it.
            env.kill()
            raise

    async def _initialised(self, env: Environment, timeout_s: int, memory_mb: int, t0: float) -> Environment:
        """Waits for the worker's ready frame; raises InitError (the worker stopped) if init failed."""
        proc = env.proc
        try:
            ready = await asyncio.wait_for(env._read(), INIT_LIMIT_S + timeout_s)
            if not isinstance(ready, dict):
                raise ValueError(f"a ready frame that is not an object: {type(ready).__name__}")
        except (asyncio.IncompleteReadError, TimeoutError, ValueError) as e:
            env.kill()
            await proc.wait()
            raise InitError(
                {"errorType": "Runtime.ExitError", "errorMessage": f"RequestId: init Error: Runtime exited before it was ready ({type(e).__name__})"},
                (time.perf_counter() - t0) * 1000.0,
            ) from None
        env.init_ms = (time.perf_counter() - t0) * 1000.0  # what the caller waited: process start + import
        error = ready.get("error")
        if error is None and ready.get("max_rss_mb", 0) > memory_mb:
            error = {"errorType": "Runtime.OutOfMemory",
                     "errorMessage": f"Init used {ready['max_rss_mb']} MB, more than MemorySize {memory_mb} MB"}
        if error:
            env.kill()
            await proc.wait()
            raise InitError(error, env.init_ms)
        env.state = "ready"
        return env

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.keep_alive_s / 4))
            now = time.monotonic()
            for stack in self.idle.values():
                # No await in this loop: an environment released meanwhile must not be lost.
                expired = [e for e in stack if not e.alive or now - e.last_used > self.keep_alive_s]
                stack[:] = [e for e in stack if e not in expired]
                for env in expired:
                    env.kill()  # asyncio's child watcher reaps the exited process
