"""Ctrl-C while a step changes the weights is held until the step ends; a second one stops at once."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from roll_agentic.config import Config
from roll_agentic.train.checkpoint import save_checkpoint
from roll_agentic.train.job_setup import resolve_run_dir
from roll_agentic.train.step_guard import StepGuard


def test_one_interrupt_is_held_until_the_step_ends():
    guard, done = StepGuard(), []
    guard.begin()
    os.kill(os.getpid(), signal.SIGINT)
    done.append("rest of the step, logged")
    with pytest.raises(KeyboardInterrupt):
        guard.end()
    assert done == ["rest of the step, logged"] and not guard.torn
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_second_interrupt_stops_at_once_and_marks_the_step_torn():
    guard, done = StepGuard(), []
    guard.begin()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        done.append("never")
    assert done == [] and guard.torn
    guard.abandon()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_step_without_interrupts_passes_through():
    guard = StepGuard()
    guard.begin()
    guard.end()
    assert not guard.torn and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_new_run_will_not_take_over_a_run_dir_with_checkpoints(tmp_path):
    """It would have pruned its own new checkpoints in favour of the old run's higher steps."""
    cfg = Config(output_dir=str(tmp_path), run_name="base")
    assert resolve_run_dir(cfg) == tmp_path / "base"  # nothing there yet
    save_checkpoint(tmp_path / "base" / "checkpoints", 5, {"w": torch.zeros(1)}, {}, {"buffer": {}})
    with pytest.raises(RuntimeError, match="trainer.resume=true"):
        resolve_run_dir(cfg)
    cfg.trainer.resume = True
    assert resolve_run_dir(cfg) == tmp_path / "base"


def test_a_resume_of_a_run_without_a_checkpoint_is_refused_before_anything_starts(tmp_path):
    """`trainer.resume=true run_name=<typo>` was refused only once Ray, the engines and the
    trainer had started (minutes with vLLM)."""
    cfg = Config(output_dir=str(tmp_path), run_name="base")
    cfg.trainer.resume = True
    with pytest.raises(FileNotFoundError, match=r"trainer.resume=true but .*base/checkpoints has no complete "
                                                r"checkpoint; check run_name"):
        resolve_run_dir(cfg)
    save_checkpoint(tmp_path / "base" / "checkpoints", 5, {"w": torch.zeros(1)}, {}, {"buffer": {}})
    assert resolve_run_dir(cfg) == tmp_path / "base"


def test_a_process_that_ignores_ctrl_c_keeps_ignoring_it_during_a_step():
    """Started in the background (SIGINT ignored), a run took a SIGINT during weight updates
    alone and dropped it at every other moment."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        guard = StepGuard()
        guard.begin()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        guard.end()  # nothing held, nothing raised
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_sigterm_during_a_step_is_held_like_ctrl_c_and_noted():
    """A job scheduler's SIGTERM mid-update left a checkpoint-less stop (Ray's handler exits at once)."""
    before = signal.signal(signal.SIGTERM, lambda *_: pytest.fail("SIGTERM not held during the step"))
    try:
        guard = StepGuard()
        guard.begin()
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt):
            guard.end()
        assert not guard.torn and guard.received == {signal.SIGTERM}
        assert signal.getsignal(signal.SIGTERM) is not guard._hold  # the handler before the step is back
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_error_after_the_update_is_not_torn_but_one_inside_it_is():
    """Torn was the whole step, sync included: an engine refusing the weights after a whole
    update lost every step since the last checkpoint, though the trainer's state was whole."""
    guard = StepGuard()
    guard.begin()
    assert guard.torn  # inside the update: the weights may hold part of it
    guard.update_done()
    assert not guard.torn and guard.active  # its sync, its evaluation: the trainer's state is whole
    guard.abandon()
    assert not guard.updated
    guard.begin()  # the next step starts torn again
    assert guard.torn
    guard.end()
    assert not guard.torn and not guard.updated


def test_a_second_interrupt_after_the_update_still_saves_nothing():
    """It said "stops at once, without saving": a whole update does not make it save."""
    guard = StepGuard()
    guard.begin()
    guard.update_done()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    assert guard.torn
    guard.abandon()
    assert not guard.torn
    guard.begin()
    guard.update_done()
    assert not guard.torn  # the next step's update is whole: not torn by the last one's stop
    guard.end()


def test_update_done_outside_a_step_marks_nothing():
    guard = StepGuard()
    guard.update_done()
    assert not guard.updated and not guard.torn
