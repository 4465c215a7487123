"""Ctrl-C while a step changes the weights: finish the step, then stop with a whole checkpoint.

Between its first optimizer step and its last (the update's end) a step is
half done: with `ppo_epochs=2`, say, the weights hold one of its two updates.
A checkpoint written then is labelled with the last whole step but holds
more than it, and it replaced that step's good checkpoint. So an interrupt
from `begin()` (the update starts) to `end()` (the step is logged) is held
and raised at `end()`; a second Ctrl-C stops at once, and the run then
writes nothing (`torn`), leaving the last checkpoint as it was. SIGTERM
(a job scheduler stopping the run, `train/termination.py`) is held the same
way.

Half done is the update itself, though, not the whole step: once the trainer's
update is whole (`update_done()`: every optimizer step of it taken, its step
counted) the trainer's weights, optimizer state and step agree, and what is
left (the weights' publication to the engines, the buffer's advance, the log)
changes none of them. An error there (an engine refusing the weights, a dead
rollout worker, an OOM writing the weights file, a failing evaluation) is no
longer `torn`: the run finishes the step's bookkeeping and saves it (job.py),
instead of losing every step trained since the last checkpoint. A resume
publishes the checkpoint's weights to its fresh engines before its first
rollout (`TrainingJob._maybe_resume`), so engines that missed them are no
concern. Only the second interrupt stays `torn` after the update: it asked to
stop at once, without saving.
"""

from __future__ import annotations

import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM)  # signals a step holds until it is whole


class StepGuard:
    def __init__(self) -> None:
        self.active = False  # between begin() and end()
        self.updated = False  # the step's update is whole (see `update_done()`)
        self._at_once = False  # the second interrupt stopped the step: nothing is saved
        self._held = False
        self._previous: dict[int, object] = {}  # signal: its handler before begin()
        self.received: set[int] = set()  # signals held or acted on, over the guard's life

    @property
    def torn(self) -> bool:
        """The run must save nothing: an error or an interrupt stopped the current step inside
        its update (weights or optimizer state perhaps part-way), or the second Ctrl-C said to
        stop at once. An error after `update_done()` is not torn: the trainer's state is whole."""
        return self.active and (not self.updated or self._at_once)

    def update_done(self) -> None:
        """The step's update is whole: the trainer's weights, optimizer state and step counter
        agree, and the rest of the step (publication, the buffer's advance, logging) changes
        none of them. Signals stay held to `end()`: the step is still logged first."""
        if self.active:
            self.updated = True

    def begin(self) -> None:
        if self.active:
            return
        # Only the main thread may take signals. A process told to ignore Ctrl-C (started
        # in the background, `nohup`) keeps ignoring it: holding it here made a SIGINT act
        # during weight updates alone, and be dropped at any other moment.
        if threading.current_thread() is threading.main_thread():
            for signum in HELD:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._hold)
        self.updated = self._at_once = False
        self.active = True

    def end(self) -> None:
        """The step is whole (updated, published, logged): a held interrupt is raised now."""
        if not self.active:
            return
        self._restore()
        self.active = self.updated = False
        if self._held:
            self._held = False
            raise KeyboardInterrupt

    def abandon(self) -> None:
        """The step stops (an error, or a second Ctrl-C): the usual Ctrl-C again, nothing raised."""
        self._restore()
        self._held = False
        self.active = self.updated = self._at_once = False

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _hold(self, signum, frame) -> None:
        self.received.add(signum)
        if self._held:
            self._at_once = True  # torn even after the update: it said "without saving"
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self._held = True
        if signum == signal.SIGTERM:
            print("\nterminated (SIGTERM): finishing this step first, so that the checkpoint is whole "
                  "(a second SIGTERM stops at once, without saving)", flush=True)
        else:
            print("\ninterrupted: finishing this step first, so that the checkpoint is whole "
                  "(Ctrl-C again stops at once, without saving)", flush=True)
