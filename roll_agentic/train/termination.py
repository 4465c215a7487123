"""SIGTERM stops a run the way Ctrl-C does: the step finishes, a checkpoint is saved, the run exits.

Job schedulers stop work with SIGTERM: Slurm's preemption and time limit,
Kubernetes evicting a pod, `docker stop`, a plain `kill`. They send SIGKILL
after a grace period (30 s on Kubernetes by default). Ray's driver set-up
(`ray.init`) installs its own SIGTERM handler, `sys.exit`, which ends a run
wherever it is: no checkpoint of the steps since the last one, the rollout
actors killed mid-call (their tracebacks fill the terminal), and a resume
that repeats those steps. Installed after `ray.init`, this handler raises
`KeyboardInterrupt` instead, so the run takes its Ctrl-C path
(`TrainingJob.run`): outside a weight update it saves a checkpoint of the
last whole step and stops; during one, `StepGuard` holds it until the step
is whole. A SIGKILL that comes before that leaves the last checkpoint as it
was (checkpoints are written atomically), so nothing is ever half saved.
"""

from __future__ import annotations

import signal
import threading

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM: 143


class Terminated(KeyboardInterrupt):
    """A SIGTERM, taken as Ctrl-C: every `except KeyboardInterrupt` path runs for it.

    Not always the type that arrives: a signal taken while `ray.get` waits comes out
    of it as a plain `KeyboardInterrupt`, so callers that must tell the two apart
    read `SigtermAsInterrupt.received`.
    """


class SigtermAsInterrupt:
    """While installed, SIGTERM raises `Terminated` (a `KeyboardInterrupt`) and sets `received`.

    Only the main thread can take signals; elsewhere, or where SIGTERM is
    ignored on purpose, `install` changes nothing. `restore` puts the
    previous handler (Ray's) back, so that a SIGTERM during the run's
    clean-up, after its checkpoint, ends it the way Ray would.
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: object = None
        self._installed = False

    def install(self) -> SigtermAsInterrupt:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        ):
            self._previous = signal.signal(signal.SIGTERM, self._interrupt)
            self._installed = True
        return self

    def renew(self) -> None:
        """Put this handler back after `ray.init`, if installed.

        Ray's driver set-up replaces it twice: with `sys.exit` in Python, and
        with a crash dump and abort in C (its core worker's failure-signal
        handler), which Python's own records do not show. A SIGTERM while a
        run was starting printed Ray's stack dump and ended in an abort (134),
        its processes and run folder left behind.
        """
        if self._installed:
            signal.signal(signal.SIGTERM, self._interrupt)

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _interrupt(self, signum, frame) -> None:
        self.received = True
        raise Terminated
