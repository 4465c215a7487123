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
