"""A multiplexed job's router is reset when its rollout workers are killed and rebuilt."""

from __future__ import annotations

import asyncio


class _Call:
    def __init__(self, fn):
        self.remote = fn


def test_moving_the_workers_resets_the_router_before_the_new_workers_start(monkeypatch, tmp_path):
    """The router outlived the killed workers: their dead marks (cleared only by their watchers)
    kept a restarted, healthy engine out of routing for the rest of the job."""
    from roll_agentic.config import Config
    from roll_agentic.mux import job_runner
    from roll_agentic.mux.job_runner import JobRunner
    from roll_agentic.mux.job_state import JobRecord
    from roll_agentic.mux.phase_board import PhaseBoard

    calls: list[str] = []

    async def reset():
        calls.append("reset")

    async def restart_buffer(state):
        calls.append("kill")

    async def run_state(untrained=False):
        return {"buffer": None}

    def spawn(nodes):
        calls.append("spawn")
        runner.workers = []

    async def pin(actors, cpus):
        return None

    cfg = Config()
    cfg.output_dir, cfg.run_name = str(tmp_path / "jobs"), "j"
    runner = JobRunner(cfg, JobRecord("j", 2.0, 10), PhaseBoard(), {"r": []}, {}, 5.0)
    runner.router = type("Router", (), {"reset": _Call(reset)})()
    runner.buffer = None
    monkeypatch.setattr(runner, "_restart_buffer", restart_buffer)
    monkeypatch.setattr(runner, "_run_state", run_state)
    monkeypatch.setattr(runner, "_spawn_workers", spawn)
    monkeypatch.setattr(job_runner, "pin_actors", pin)
    asyncio.run(runner._move_workers(["r"]))
    assert calls == ["kill", "reset", "spawn"]
