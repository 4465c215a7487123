"""Ctrl-C while a step changes the weights: finish the step, then stop with a whole checkpoint.

Between its first optimizer step and the new weights' publication a step is
half done: with `ppo_epochs=2`, say, the weights hold one of its two updates.
A checkpoint written then is labelled with the last whole step but holds
more than it, and it replaced that step's good checkpoint. So an interrupt
there is held until the step ends; a second Ctrl-C stops at once, and the
run then writes nothing (`torn`), leaving the last checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class StepGuard:
    def __init__(self) -> None:
        self.torn = False  # an interrupt or error left a step half done
        self._held = False

    @contextlib.contextmanager
    def updating(self) -> Iterator[None]:
        """The part of a step that changes the weights; KeyboardInterrupt is raised after it."""
        in_main = threading.current_thread() is threading.main_thread()  # only it may take signals
        previous = signal.getsignal(signal.SIGINT) if in_main else None
        if in_main:
            signal.signal(signal.SIGINT, self._hold)
        try:
            yield
        except BaseException:
            self.torn = True
            raise
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous)
        if self._held:
            self._held = False
            raise KeyboardInterrupt

    def _hold(self, signum, frame) -> None:
        if self._held:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        self._held = True
        print("\ninterrupted: finishing this step first, so that the checkpoint is whole "
              "(Ctrl-C again stops at once, without saving)", flush=True)
