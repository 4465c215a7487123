"""Ctrl-C while a step changes the weights: finish the step, then stop with a whole checkpoint.

Between its first optimizer step and the new weights' publication a step is
half done: with `ppo_epochs=2`, say, the weights hold one of its two updates.
A checkpoint written then is labelled with the last whole step but holds
more than it, and it replaced that step's good checkpoint. So an interrupt
from `begin()` (the update starts) to `end()` (the step is logged) is held
and raised at `end()`; a second Ctrl-C stops at once, and the run then
writes nothing (`torn`), leaving the last checkpoint as it was.
"""

from __future__ import annotations

import signal
import threading


class StepGuard:
    def __init__(self) -> None:
        self.active = False  # between begin() and end()
        self._held = False
        self._previous = None
        self._installed = False

    @property
    def torn(self) -> bool:
        """An interrupt (the second Ctrl-C) or an error left the current step half done."""
        return self.active

    def begin(self) -> None:
        if self.active:
            return
        # Only the main thread may take signals. A process told to ignore Ctrl-C (started
        # in the background, `nohup`) keeps ignoring it: holding it here made a SIGINT act
        # during weight updates alone, and be dropped at any other moment.
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._hold)
            self._installed = True
        self.active = True

    def end(self) -> None:
        """The step is whole (updated, published, logged): a held interrupt is raised now."""
        if not self.active:
            return
        self._restore()
        self.active = False
        if self._held:
            self._held = False
            raise KeyboardInterrupt

    def abandon(self) -> None:
        """The step stops (an error, or a second Ctrl-C): the usual Ctrl-C again, nothing raised."""
        self._restore()
        self._held = False
        self.active = False

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _hold(self, signum, frame) -> None:
        if self._held:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self._held = True
        print("\ninterrupted: finishing this step first, so that the checkpoint is whole "
              "(Ctrl-C again stops at once, without saving)", flush=True)
