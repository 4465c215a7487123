"""metrics.jsonl and TensorBoard agree after a resume: the redone steps appear once."""

from __future__ import annotations

from roll_agentic.telemetry.metrics import MetricsLog


def _scalars(run_dir, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_a_resume_redoes_steps_once_in_both_logs(tmp_path):
    first = MetricsLog(tmp_path)
    for step in range(1, 6):
        first.write(step, {"loss": float(step)})
    first.close()
    resumed = MetricsLog(tmp_path)  # the run resumes from its step-3 checkpoint
    resumed.truncate_after(3)
    for step in (4, 5):
        resumed.write(step, {"loss": 100.0 + step})
    resumed.close()
    assert [(r["step"], r["loss"]) for r in resumed.read()] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 104.0), (5, 105.0)]
    assert _scalars(tmp_path, "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 104.0), (5, 105.0)]


def test_a_line_torn_by_a_kill_does_not_stop_the_resume(tmp_path):
    """A kill mid-write left half a line: the resume's truncate_after died on a JSONDecodeError."""
    log = MetricsLog(tmp_path, tensorboard=False)
    for step in (1, 2, 3):
        log.write(step, {"loss": float(step)})
    with open(log.path, "a") as f:
        f.write('{"step": 4, "lo')
    resumed = MetricsLog(tmp_path, tensorboard=False)
    resumed.truncate_after(3)
    resumed.write(4, {"loss": 4.0})
    assert [(r["step"], r["loss"]) for r in resumed.read()] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert len(log.path.read_text().splitlines()) == 4


def test_plots_of_no_data_write_a_png_without_a_warning(tmp_path):
    """A series with no finite value (a run stopped in step 1, a pool that reported nothing)
    made matplotlib warn "No artists with labels found to put in legend" on stderr."""
    import warnings

    from roll_agentic.telemetry.plots import pool_busy, reward_curve

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in ([], [{"step": 1, "reward/a/mean": None}]):
            assert reward_curve(rows, ["a"], tmp_path / "r.png").stat().st_size > 0
            assert pool_busy(rows, ["p"], tmp_path / "p.png").stat().st_size > 0
        assert reward_curve([{"step": 1, "reward/a/mean": 0.5}], ["a"], tmp_path / "one.png").exists()


def test_the_step_is_written_whole_even_when_the_metrics_carry_it_as_a_float(tmp_path):
    log = MetricsLog(tmp_path)
    log.write(2, {"step": 2.0, "loss": 0.5})
    log.close()
    row = log.read()[0]
    assert row == {"step": 2, "loss": 0.5} and isinstance(row["step"], int)
    assert '"step": 2,' in (tmp_path / "metrics.jsonl").read_text()
