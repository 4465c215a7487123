"""A run's config.json is replaced atomically: rewritten in place (truncate, then write), a kill
or a full disk left it empty, and the resume checks that read it were then silently skipped."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import asdict

import pytest

from roll_agentic.train import checkpoint
from roll_agentic.train.checkpoint import write_atomic
from roll_agentic.train.resume_record import config_json


def _job(tmp_path):
    from roll_agentic.hydra_config import load_config
    from roll_agentic.train import job as job_mod

    cfg = load_config([f"output_dir={tmp_path}", "run_name=r", "engine=hf", "trainer.total_steps=30"])
    job = job_mod.TrainingJob(cfg)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    return job


def _full_disk(fd):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text('{"old": 1}')
    monkeypatch.setattr(checkpoint.os, "fsync", _full_disk)
    with pytest.raises(OSError):
        write_atomic(path, b'{"new": 2}')
    assert path.read_text() == '{"old": 1}'
    assert os.listdir(tmp_path) == ["config.json"]


def test_the_jobs_config_is_written_through_the_atomic_path(tmp_path, monkeypatch):
    job = _job(tmp_path)
    saved = job.run_dir / "config.json"
    saved.write_text('{"trainer": {"total_steps": 20}}')  # the run's own, before this resume
    with monkeypatch.context() as m:
        m.setattr(checkpoint.os, "fsync", _full_disk)
        with pytest.raises(OSError):
            job._save_config()
    assert json.loads(saved.read_text()) == {"trainer": {"total_steps": 20}}  # intact, not emptied
    assert not [p for p in job.run_dir.iterdir() if ".tmp-" in p.name]
    job._save_config()
    assert saved.read_text() == config_json(asdict(job.cfg))
    assert json.loads(saved.read_text())["trainer"]["total_steps"] == 30
