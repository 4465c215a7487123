"""Starting and stopping the emulator process: bind, record the endpoint, serve, clean up.

The chosen endpoint is written to `<state_dir>/endpoint.json` (with this
process's pid) once the socket listens: `roll-agentic serverless ...`
commands default to it, and a parent that started us with `--port 0` reads
the port from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import signal
import time
from pathlib import Path

from aiohttp import web

from serverless.access import is_loopback
from serverless.server import ENDPOINT_FILE, Emulator, ServerConfig


def read_endpoint(state_dir: Path) -> dict | None:
    try:
        return json.loads((Path(state_dir) / ENDPOINT_FILE).read_text())
    except (OSError, ValueError):
        return None


def _process_gone(pid: int, was_parent: bool) -> bool:
    if was_parent:  # reparented: our parent has exited (a zombie parent still counts as gone)
        return os.getppid() != pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, another user's
        return False
    return False


async def _stop_when_gone(pid: int, stop: asyncio.Event, every_s: float = 1.0) -> None:
    was_parent = os.getppid() == pid
    while not stop.is_set():
        if _process_gone(pid, was_parent):
            print(f"process {pid} that started this emulator is gone: stopping", flush=True)
            stop.set()
            return
        await asyncio.sleep(every_s)


def _bind_error(cfg: ServerConfig, err: OSError) -> str:
    where = f"{cfg.host}:{cfg.port}"
    if err.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: the port is taken (another emulator or program); pass --port 0 "
                "for any free port, or stop the emulator there with `roll-agentic serverless stop`")
    return f"cannot listen on {where}: {err.strerror or err}"


async def serve(cfg: ServerConfig) -> None:
    if not cfg.allow_remote and not is_loopback(cfg.host):
        raise SystemExit(
            f"refusing to listen on {cfg.host}: the emulator runs code it is sent and has no isolation "
            "beyond a process; use 127.0.0.1, or pass --allow-remote if you really mean it"
        )
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    emulator = Emulator(cfg)
    runner = web.AppRunner(emulator.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        # A port in use (a second `start`, most often) is the user's to fix: one line, not a traceback.
        await emulator.close()
        await runner.cleanup()
        raise SystemExit(_bind_error(cfg, e)) from None
    port = site._server.sockets[0].getsockname()[1]  # the real port when asked for 0
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    endpoint = f"http://{host}:{port}"
    emulator.pool.start_reaper()
    record = Path(cfg.state_dir) / ENDPOINT_FILE
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps({"endpoint_url": endpoint, "pid": os.getpid(), "started_at": time.time()}))
    os.replace(tmp, record)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, emulator.stop_event.set)
    print(f"serverless emulator listening on {endpoint} (state dir {cfg.state_dir})", flush=True)
    watch = asyncio.create_task(_stop_when_gone(cfg.parent_pid, emulator.stop_event)) if cfg.parent_pid > 0 else None
    try:
        await emulator.stop_event.wait()
    finally:
        if watch is not None:
            watch.cancel()
        await emulator.close()
        await runner.cleanup()
        mine = read_endpoint(Path(cfg.state_dir))
        if mine and mine.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                record.unlink()


def run(cfg: ServerConfig) -> None:
    """Serves until SIGTERM/SIGINT or POST /_emulator/shutdown; uses uvloop where installed."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(cfg))
    else:
        uvloop.run(serve(cfg))
