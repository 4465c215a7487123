"""Tail batching across a resume, end to end: the long round a checkpoint left open runs."""

import json

import pytest

from roll_agentic.train.job import TrainingJob
from tests.train.test_job_e2e import _cfg

pytestmark = pytest.mark.slow


def test_a_resumed_run_trains_the_long_round_its_checkpoint_had_opened(tmp_path, tiny_model_path):
    """P0 = 2 and eta = 1.25 defer one prompt per short round: the checkpoint of step 2
    holds the long round of step 3, just opened. The resumed run raced those prompts in
    a short round instead (deferred once more, never run to their end)."""
    tail = ("rollout.mode=tail_batching", "algo.alpha=0", "trainer.save_every=2")
    TrainingJob(_cfg(tmp_path, *tail, "trainer.total_steps=2")).run()
    run = tmp_path / "e2e"
    saved = json.loads((run / "checkpoints" / "step_000002" / "run.json").read_text())["buffer"]
    assert saved["round_kind"] == "long"
    assert len(saved["long_queue"]) >= 2  # the long round's deferred prompts, at its head
    TrainingJob(_cfg(tmp_path, *tail, "trainer.total_steps=3", "trainer.resume=true")).run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["tail/round_is_long"] for r in rows] == [0.0, 0.0, 1.0]
    # counted once across the resume: 3 rounds trained, and step 4's (short) already opened
    assert rows[2]["tail/rounds_long"] == 1 and rows[2]["tail/rounds_short"] == 3
    assert rows[2]["tail/aborted_prompts"] == rows[1]["tail/aborted_prompts"]  # a long round cuts nothing
    fill = rows[2]["tail/fill_prompts"] - rows[1]["tail/fill_prompts"]
    assert rows[2]["train/samples"] == (2 + fill) * 4 and rows[2]["rollout/staleness_max"] == 0


def test_ctrl_c_while_a_round_streams_saves_its_prompts_untrained(tmp_path, tiny_model_path, monkeypatch):
    """Ctrl-C after the round's groups were streamed (taken from the buffer, gradients
    accumulated) but before its update: the checkpoint held neither those groups nor
    their prompts, and counted their trajectories as trained."""
    import os
    import signal

    real_stream_phase = TrainingJob.stream_phase
    taken: list = []

    def interrupted_stream_phase(self):
        groups, m = real_stream_phase(self)
        if self.version == 1:  # step 2's round has closed and streamed; its update has not begun
            taken.extend(sorted((g[0].task, g[0].seed) for g in groups))
            os.kill(os.getpid(), signal.SIGINT)
        return groups, m

    tail = ("rollout.mode=tail_batching", "algo.alpha=0")
    monkeypatch.setattr(TrainingJob, "stream_phase", interrupted_stream_phase)
    result = TrainingJob(_cfg(tmp_path, *tail, "trainer.total_steps=3")).run()
    monkeypatch.undo()
    run = tmp_path / "e2e"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert result["interrupted"] and result["steps"] == 1 and [r["step"] for r in rows] == [1]
    saved = json.loads((run / "checkpoints" / "step_000001" / "run.json").read_text())["buffer"]
    assert saved["round_kind"] == "short" and len(taken) == 2
    # the closed round's two finished prompts run again first; its loser stays deferred
    assert sorted((r["task"], r["seed"]) for r in saved["requeued"]) == taken
    assert saved["counters"]["trajectories_trained"] == rows[0]["buffer/trajectories_trained"]
    TrainingJob(_cfg(tmp_path, *tail, "trainer.total_steps=2", "trainer.resume=true")).run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["buffer/trajectories_trained"] == rows[0]["buffer/trajectories_trained"] + rows[1]["train/samples"]
