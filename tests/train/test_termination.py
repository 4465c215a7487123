"""SIGTERM takes the run's Ctrl-C path (checkpoint, then stop) instead of Ray's exit-at-once."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from roll_agentic.train.termination import EXIT_CODE, SigtermAsInterrupt, Terminated


def _exit_at_once(signum, frame):  # what ray.init installs in the driver
    sys.exit(signum)


def test_sigterm_raises_keyboard_interrupt_while_installed_then_the_previous_handler_is_back():
    before = signal.signal(signal.SIGTERM, _exit_at_once)
    try:
        term = SigtermAsInterrupt().install()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        assert term.received
        term.restore()
        assert signal.getsignal(signal.SIGTERM) is _exit_at_once
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_process_told_to_ignore_sigterm_keeps_ignoring_it():
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        term = SigtermAsInterrupt().install()
        os.kill(os.getpid(), signal.SIGTERM)  # nothing raised
        assert not term.received and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        term.restore()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_exit_code_is_the_shells_for_a_sigterm():
    assert EXIT_CODE == 143


def test_a_sigterm_is_a_keyboard_interrupt_that_callers_can_tell_apart():
    before = signal.signal(signal.SIGTERM, _exit_at_once)
    term = SigtermAsInterrupt().install()
    try:
        with pytest.raises(Terminated) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
        assert isinstance(caught.value, KeyboardInterrupt)  # every Ctrl-C path runs for it
    finally:
        term.restore()
        signal.signal(signal.SIGTERM, before)


@pytest.mark.slow
@pytest.mark.parametrize(("command", "said", "removed"), [
    ("train", "terminated (SIGTERM) while starting: no step was taken", "run dir {} removed: the run did not start"),
    ("eval", "terminated (SIGTERM): no result", "eval dir {} removed: the eval did not start"),
])
def test_a_sigterm_while_it_starts_stops_it_cleanly_with_143(tmp_path, command, said, removed):
    """Ray's driver set-up replaced the handler with its own, in C too: a SIGTERM while the
    engines started printed Ray's stack dump and aborted (134), leaving the run folder (its
    emulator state) and, at times, Ray's agents behind."""
    import subprocess
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    run_dir = tmp_path / "s"
    args = [sys.executable, "-m", "roll_agentic.cli", command, f"output_dir={tmp_path}", "run_name=s",
            "trainer.total_steps=2", "telemetry.progress=false"]
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled")
    run = subprocess.Popen(args, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        # Ray is up and the reward emulator listens: the vLLM engines are starting now.
        while not (run_dir / "serverless" / "endpoint.json").exists() and run.poll() is None:
            assert time.monotonic() < deadline, "the emulator never started"
            time.sleep(0.2)
        assert run.poll() is None, run.stdout.read()[-3000:] + run.stderr.read()[-3000:]
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(30)
    assert run.returncode == EXIT_CODE, out[-2000:] + err[-3000:]
    assert said in err
    assert "SIGTERM received at time" not in err  # Ray's crash dump
    assert not run_dir.exists() and removed.format(run_dir) in out
