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
