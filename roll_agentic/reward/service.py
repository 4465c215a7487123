"""The local emulator as a child process of a training run, and deploying reward modules to it.

    with LocalServerless() as svc:
        url = svc.start(run_dir / "serverless")
        svc.deploy_rewards(url, ["frozenlake", "guess_number"], cfg.reward)
        client = make_reward_client(cfg.reward, url)

The emulator listens on a free loopback port chosen by the OS (`--port 0`);
its address is read back from `<state_dir>/endpoint.json`, so there is no
race between picking a port and binding it. Its workers exit by themselves
when it goes (their command pipe closes), so nothing outlives `stop()`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from roll_agentic.config import RewardConfig
from roll_agentic.reward.reward_ref import source_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


def deploy_rewards(endpoint_url: str, names: list[str], cfg: RewardConfig, source_dir: Path | None = None) -> list[dict]:
    """Zips each reward module, creates or updates `cfg.function_prefix + <its file stem>`, waits Active.

    `names` are tasks' `reward`s: `x` for `rewards/x.py` (or `source_dir/x.py`), `my_pkg.x`
    for a module of yours (`reward_ref.py`). Returns the functions' configurations. Memory and
    timeout come from the module's LAMBDA_MEMORY_MB / LAMBDA_TIMEOUT_S when declared; else
    256 MB and cfg.timeout_s.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    from serverless.deploy import deploy, lambda_client, missing_imports_warning, spec_for

    paths = [_module_file(name, source_dir) for name in dict.fromkeys(names)]  # all found before any deploy
    client = lambda_client(endpoint_url, cfg.region, max_attempts=3)
    out = []
    try:
        for path in paths:
            spec = spec_for(path, prefix=cfg.function_prefix)
            if spec.missing_on_lambda:
                log.warning("reward module %s", missing_imports_warning(path.name, spec.missing_on_lambda))
            if "LAMBDA_TIMEOUT_S" not in _declared(path):
                spec.timeout_s = max(1, int(round(cfg.timeout_s)))
            try:
                out.append(deploy(client, spec))
            except (BotoCoreError, ClientError) as err:  # a refused name, no credentials, access denied
                raise RuntimeError(f"deploying reward {path.name} as Lambda function {spec.name!r} to "
                                   f"{endpoint_url} failed: {err}") from None
    finally:
        client.close()
    return out


def _module_file(name: str, source_dir: Path | None) -> Path:
    if source_dir is None or "." in name:
        return source_file(name)
    path = Path(source_dir) / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no reward module {path}: a task's `reward` must name a file in {source_dir}")
    return path


def _declared(path: Path) -> dict:
    from serverless.deploy import module_settings

    return module_settings(path)


class LocalServerless:
    """Starts, feeds and stops one emulator process on 127.0.0.1."""

    def __init__(self, keep_alive_s: float = 600.0, account_concurrency: int = 1000,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.keep_alive_s = keep_alive_s
        self.account_concurrency = account_concurrency
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen | None = None
        self.endpoint_url = ""
        self.state_dir: Path | None = None

    def start(self, state_dir: str | Path, timeout_s: float = 30.0) -> str:
        """Starts the emulator and returns its endpoint URL once it answers."""
        if self.proc is not None:
            raise RuntimeError("this LocalServerless is already running; stop() it first")
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        log = open(self.state_dir / "emulator.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "serverless.cli", "start", "--host", "127.0.0.1", "--port", "0",
                 "--state-dir", str(self.state_dir), "--keep-alive", str(self.keep_alive_s),
                 "--account-concurrency", str(self.account_concurrency), "--parent-pid", str(os.getpid()),
                 *self.extra_args],
                cwd=str(PROJECT_ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.state_dir / "emulator.log").read_text(errors="replace")[-2000:]
                self.proc = None
                raise RuntimeError(f"the serverless emulator exited at start:\n{tail}")
            url = self._recorded_url()
            if url and _answers(url):
                self.endpoint_url = url
                return url
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"the serverless emulator did not answer within {timeout_s} s (see {self.state_dir}/emulator.log)")

    def _recorded_url(self) -> str:
        try:
            rec = json.loads((self.state_dir / "endpoint.json").read_text())
        except (OSError, ValueError):
            return ""
        return rec.get("endpoint_url", "") if self.proc is not None and rec.get("pid") == self.proc.pid else ""

    def deploy_rewards(self, endpoint_url: str, names: list[str], cfg: RewardConfig) -> list[dict]:
        return deploy_rewards(endpoint_url, names, cfg)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (the emulator stops its workers and removes endpoint.json), then SIGKILL."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> LocalServerless:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/_emulator/health", timeout=1) as resp:  # noqa: S310 - loopback
            return resp.status == 200
    except OSError:
        return False
