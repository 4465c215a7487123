"""The folder a multiplexed job runs in, afresh and resumed (mux/job_dirs.py), and the run a
resumed mux session goes on with (mux/session.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roll_agentic.config import Config
from roll_agentic.mux.multiplexer import Multiplexer
from roll_agentic.mux.mux_config import MuxConfig
from roll_agentic.mux.session import run_to_resume


def _checkpoint(run: Path, step: int, mtime: float | None = None) -> None:
    """A complete checkpoint as `latest_checkpoint` finds one (its run.json is written last)."""
    ckpt = run / "checkpoints" / f"step_{step:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / "run.json").write_text(json.dumps({"step": step}))
    if mtime is not None:
        os.utime(ckpt, (mtime, mtime))


def test_a_resume_goes_on_in_the_folder_of_the_newest_checkpoint_not_always_the_first(tmp_path):
    """Stopped before its first checkpoint, a job ran again in jobs/a-2; the next --resume looked
    in jobs/a only, found nothing, and started over in jobs/a-3."""
    mux = Multiplexer(MuxConfig(), str(tmp_path), "unused")
    jobs = tmp_path / "jobs"
    (jobs / "a").mkdir(parents=True)  # its first run: stopped before any checkpoint
    again = mux._job_config(Config(), "a", 1, resume=True)
    assert (again.run_name, again.trainer.resume) == ("a-2", False)  # nothing to go on from: afresh
    _checkpoint(jobs / "a-2", 3)
    resumed = mux._job_config(Config(), "a", 1, resume=True)
    assert (resumed.run_name, resumed.trainer.resume) == ("a-2", True)
    assert Path(resumed.output_dir) == jobs
    # Not resumed: a folder of its own, as before.
    assert mux._job_config(Config(), "a", 1).run_name == "a-3"


def test_a_name_submitted_twice_resumes_its_newest_checkpoint_by_step_then_time(tmp_path):
    mux = Multiplexer(MuxConfig(), str(tmp_path), "unused")
    jobs = tmp_path / "jobs"
    _checkpoint(jobs / "a", 2)
    _checkpoint(jobs / "a-2", 4)
    _checkpoint(jobs / "a-x", 9)  # another job's folder ("a-x" is a name of its own)
    _checkpoint(jobs / "ab", 9)
    assert mux._job_config(Config(), "a", 1, resume=True).run_name == "a-2"
    _checkpoint(jobs / "a-3", 4, mtime=1.0)  # the same step, saved earlier: a-2's is newer
    assert mux._job_config(Config(), "a", 1, resume=True).run_name == "a-2"
    _checkpoint(jobs / "a-4", 4, mtime=4e9)  # the same step, saved later
    assert mux._job_config(Config(), "a", 1, resume=True).run_name == "a-4"
    # An unfinished save (no run.json yet) is no checkpoint.
    (jobs / "a-5" / "checkpoints" / "step_000009").mkdir(parents=True)
    assert mux._job_config(Config(), "a", 1, resume=True).run_name == "a-4"


def test_a_name_submitted_again_runs_in_a_directory_of_its_own(tmp_path, tiny_model_path):
    """In the first run's directory the trainer resumed that run's checkpoint against fresh engines."""
    mux = Multiplexer(MuxConfig(residency_budget_bytes=1 << 30), str(tmp_path), tiny_model_path)
    cfg = Config()
    cfg.algo.alpha = 0
    first = mux._job_config(cfg, "a", 1)
    assert first.run_name == "a"
    (tmp_path / "jobs" / "a" / "checkpoints").mkdir(parents=True)
    assert mux._job_config(cfg, "a", 1).run_name == "a-2"


def test_resume_finds_the_run_to_go_on_with_or_says_why_not(tmp_path):
    m = MuxConfig(name="two", output_dir=str(tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="no run of 'two' under"):
        run_to_resume(m, "latest")
    old, new = tmp_path / "out" / "two-20261101-000000", tmp_path / "out" / "my-sweep"  # --run-name my-sweep
    for run in (old, new):
        (run / "jobs").mkdir(parents=True)
        (run / "mux_run.json").write_text('{"name": "two"}')
    other = tmp_path / "out" / "three-20261105-000000"  # another yaml's run, newer
    (other / "jobs").mkdir(parents=True)
    (other / "mux_run.json").write_text('{"name": "three"}')
    os.utime(new, (2, 2))
    os.utime(other, (3, 3))

    os.utime(old, (1, 1))
    assert run_to_resume(m, "latest") == new
    assert run_to_resume(m, old.name) == old
    assert run_to_resume(m, str(old)) == old
    # Stopped during its solo baseline: the newest run has no jobs/, and no older run is taken instead.
    (tmp_path / "out" / "two-20261103-000000" / "solo").mkdir(parents=True)
    (tmp_path / "out" / "two-20261103-000000" / "mux_run.json").write_text('{"name": "two"}')
    with pytest.raises(FileNotFoundError, match="has no jobs to go on with"):
        run_to_resume(m, "latest")
    with pytest.raises(FileNotFoundError, match="has no jobs to go on with"):
        run_to_resume(m, "two-20261103-000000")
    elsewhere = tmp_path / "elsewhere" / "two-1"
    (elsewhere / "jobs").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="not under this yaml's output_dir"):
        run_to_resume(m, str(elsewhere))


def test_a_job_config_with_pools_of_its_own_is_refused_not_replaced(tmp_path):
    """A config that did not pass `mux run`/`mux submit`'s check (a stand-in handle, code):
    its pools were replaced with the multiplexer's one without a word."""
    from roll_agentic.config import ConfigError, PoolConfig

    mux = Multiplexer(MuxConfig(), str(tmp_path), "unused")
    cfg = Config()
    cfg.pools = [PoolConfig(name="default", hardware="H20")]
    with pytest.raises(ConfigError, match=r"^job a: pools=\[default\] is not honoured per mux job: "):
        mux._job_config(cfg, "a", 1)
    assert mux._job_config(Config(), "a", 1).pools == []  # left at its default: as before
