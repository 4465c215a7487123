"""Ctrl-C while a step changes the weights: finish the step, then stop with a whole checkpoint.

Between its first optimizer step and the new weights' publication a step is
half done: with `ppo_epochs=2`, say, the weights hold one of its two updates.
A checkpoint written then is labelled with the last whole step but holds
more than it, and it replaced that step's good checkpoint. So an interrupt
from `begin()` (the update starts) to `end()` (the step is logged) is held
and raised at `end()`; a second Ctrl-C stops at once, and the run then
writes nothing (`torn`), leaving the last checkpoint as it was. SIGTERM
(a job scheduler stopping the run, `train/termination.py`) is held the same
way.
"""

from __future__ import annotations

import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM)  # signals a step holds until it is whole


class StepGuard:
    def __init__(self) -> None:
        self.active = False  # between begin() and end()
        self._held = False
        self._previous: dict[int, object] = {}  # signal: its handler before begin()
        self.received: set[int] = set()  # signals held or acted on, over the guard's life

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
        if threading.current_thread() is threading.main_thread():
            for signum in HELD:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._hold)
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
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _hold(self, signum, frame) -> None:
        self.received.add(signum)
        if self._held:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self._held = True
        if signum == signal.SIGTERM:
            print("\nterminated (SIGTERM): finishing this step first, so that the checkpoint is whole "
                  "(a second SIGTERM stops at once, without saving)", flush=True)
        else:
            print("\ninterrupted: finishing this step first, so that the checkpoint is whole "
                  "(Ctrl-C again stops at once, without saving)", flush=True)
