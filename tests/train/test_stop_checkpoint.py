"""A step whose update returned is finished, once, before a stop's checkpoint (`TrainedStep`)."""

from __future__ import annotations

from types import SimpleNamespace

from roll_agentic.train import stop_checkpoint
from roll_agentic.train.step_guard import StepGuard
from roll_agentic.train.stop_checkpoint import StopCheckpoint, TrainedStep


class _Remote:
    def __init__(self, calls: list):
        self.calls = calls

    def remote(self, *args):
        self.calls.append(args)
        return args


class _Log:
    def __init__(self):
        self.rows: list = []

    def write(self, step, row):
        self.rows.append((step, row))


def _job(monkeypatch):
    monkeypatch.setattr(stop_checkpoint, "ray", SimpleNamespace(get=lambda ref: ref))
    job = StopCheckpoint()
    job.version = 4
    job.guard = StepGuard()
    job._unfinished = TrainedStep()
    job.advances = []
    job.buffer = SimpleNamespace(advance=_Remote(job.advances))
    return job


def test_a_fresh_trained_step_has_nothing_left_to_do(monkeypatch):
    job = _job(monkeypatch)
    log = _Log()
    job._finish_trained_step(log)
    assert job.advances == [] and log.rows == []


def test_a_step_stopped_after_its_update_is_advanced_and_logged_once(monkeypatch):
    job = _job(monkeypatch)
    train_m = {"train/loss": 1.0}
    job._update_done(train_m)
    assert job.version == 5
    assert job._unfinished == TrainedStep(advance=5, row={"train/loss": 1.0})
    assert job._unfinished.row is not train_m  # a copy: the step's later row replaces it
    log = _Log()
    job._finish_trained_step(log)
    job._finish_trained_step(log)
    assert job.advances == [(5,)] and log.rows == [(5, {"train/loss": 1.0})]
    assert job._unfinished == TrainedStep()


def test_a_synced_step_is_only_logged_and_without_a_log_only_advanced(monkeypatch):
    job = _job(monkeypatch)
    job._update_done({"train/loss": 1.0})
    job._unfinished.advance = None  # as sync_phase leaves it
    job._unfinished.row = {"step": 5.0}  # as _step leaves it: the whole row
    log = _Log()
    job._finish_trained_step(log)
    assert job.advances == [] and log.rows == [(5, {"step": 5.0})]

    job._update_done({"train/loss": 2.0})
    job._finish_trained_step(None)
    assert job.advances == [(6,)]
    assert job._unfinished == TrainedStep(advance=None, row={"train/loss": 2.0})


def test_the_old_names_still_import_from_the_job_module():
    from roll_agentic.train.job import ENGINE_SEED_STRIDE, STREAM_FROM, TrainingJob, train
    from roll_agentic.train.job_lifecycle import ENGINE_SEED_STRIDE as stride

    assert ENGINE_SEED_STRIDE == stride and 0 < STREAM_FROM < 1 and callable(train)
    assert TrainingJob.checkpoint is StopCheckpoint.checkpoint
