"""Evaluation: when it is due, its seeds, and what its episodes sum up to; the worker plays them."""

import asyncio

import pytest

from roll_agentic.config import EvalConfig, TaskConfig
from roll_agentic.train.evaluation import (
    Evaluation,
    eval_seeds,
    evaluation_due,
    split_seeds,
    summarize,
)
from tests.rollout.test_worker import _setup, engine_weights_file


def test_due_every_n_steps_and_after_the_last():
    cfg = EvalConfig(every=3)
    assert [s for s in range(1, 8) if evaluation_due(cfg, s, total_steps=7)] == [3, 6, 7]
    assert not any(evaluation_due(EvalConfig(every=0), s, 7) for s in range(1, 8))


def test_the_same_seeds_every_time_dealt_to_every_worker():
    seeds = eval_seeds(EvalConfig(episodes=5, seed=100))
    assert seeds == [100, 101, 102, 103, 104]
    assert split_seeds(seeds, 2) == [[100, 102, 104], [101, 103]]
    assert split_seeds(seeds[:1], 3) == [[100], [], []]


def test_failed_episodes_are_counted_not_scored_zero():
    outcomes = [
        {"status": "ok", "reward": 1.0, "success": True, "turns": 2},
        {"status": "ok", "reward": 0.0, "success": False, "turns": 4},
        {"status": "reward_failed", "reward": None, "success": False, "turns": 3},
    ]
    m = summarize("lake", outcomes)
    assert m == {"eval/lake/episodes": 2.0, "eval/lake/failed": 1.0, "eval/lake/mean": 0.5,
                 "eval/lake/success": 0.5, "eval/lake/turns": 3.0}
    assert summarize("lake", outcomes[2:]) == {"eval/lake/episodes": 0.0, "eval/lake/failed": 1.0}


class _Worker:
    """A rollout worker's `evaluate.remote` as a caller sees it: a handle per call (here the call)."""

    def __init__(self, name: str):
        self.name = name
        self.evaluate = self
        self.asked: list[tuple] = []

    def remote(self, task: str, seeds: list[int], temperature: float) -> tuple:
        self.asked.append((task, seeds, temperature))
        return (self.name, task, tuple(seeds))


def test_an_evaluation_asks_every_worker_at_once_and_sums_up_the_answers_by_task():
    # What the multiplexer's job runner awaits instead of run_evaluation's ray.get.
    workers = [_Worker("w0"), _Worker("w1")]
    tasks = [TaskConfig(name="lake", env_id="x"), TaskConfig(name="guess", env_id="y")]
    ev = Evaluation(workers, tasks, EvalConfig(episodes=3, seed=10, temperature=0.5))
    assert ev.refs == [("w0", "lake", (10, 12)), ("w1", "lake", (11,)), ("w0", "guess", (10, 12)),
                       ("w1", "guess", (11,))]
    assert workers[1].asked == [("lake", [11], 0.5), ("guess", [11], 0.5)]

    def ok(reward: float) -> dict:
        return {"status": "ok", "reward": reward, "success": reward > 0, "turns": 2}
    m = ev.metrics([[ok(1.0), ok(0.0)], [ok(1.0)], [ok(0.0), ok(0.0)], [{"status": "env_failed", "reward": None}]])
    assert m["eval/lake/mean"] == 2 / 3 and m["eval/lake/episodes"] == 3.0
    assert m["eval/guess/mean"] == 0.0 and m["eval/guess/failed"] == 1.0 and m["eval/guess/episodes"] == 2.0
    assert m["time/eval_s"] >= 0.0


def test_greedy_eval_episodes_repeat_exactly_and_never_reach_the_buffer(tiny_model_path, tmp_path):
    async def main():
        engine, buffer, worker = _setup(tiny_model_path, alpha=0, delay=0.3)
        weights = engine_weights_file(engine, tmp_path / "w.safetensors")
        first = await worker.evaluate("count", [7, 8], 0.0)
        playing = asyncio.ensure_future(worker.evaluate("count", [7, 8], 0.0))
        await asyncio.sleep(0.4)  # mid-episode: a new version (the same weights) is loaded
        await engine.load_weights(1, weights)
        again = await asyncio.wait_for(playing, 60)
        for a, b in zip(first, again, strict=True):
            assert a["status"] == b["status"] == "ok" and a["reward"] == b["reward"] == 1.0
            assert a["turns"] == b["turns"] == 3
        # at alpha = 0 a training episode would have restarted; an evaluation goes on
        assert worker.counters["stale_restarts"] == 0
        assert buffer.counters.trajectories_received == 0  # nothing of it is trained on
    asyncio.run(main())


@pytest.mark.parametrize("override, message", [
    ("eval.every=-1", "eval.every: expected an integer >= 0 (0 = off)"),
    ("eval.episodes=0", "eval.episodes: expected an integer >= 1"),
    ("eval.temperature=-0.5", "eval.temperature: expected a number >= 0 (0 = greedy)"),
])
def test_bad_eval_settings_are_one_line(override, message):
    from roll_agentic.config import ConfigError
    from roll_agentic.hydra_config import load_config

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config([override])
