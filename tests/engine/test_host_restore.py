"""A host Ray restarted reloads the weights it served before: once, before any request,
and never over newer weights loaded since (host.py, `_restore_weights`)."""

from __future__ import annotations

import asyncio

import pytest

from roll_agentic.config import EngineConfig
from roll_agentic.engine import host as host_module
from roll_agentic.engine.protocol import GenerationResult, SamplingParams


class _FakeEngine:
    """Answers at once with the version it serves; a weight load takes a few loop turns."""

    def __init__(self) -> None:
        self.version = 0
        self.loads: list[int] = []

    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str) -> GenerationResult:
        return GenerationResult([1], [0.0], "length", self.version)

    async def load_weights(self, version: int, source: str) -> None:
        self.loads.append(version)
        for _ in range(5):
            await asyncio.sleep(0)
        self.version = version

    def weight_version(self) -> int:
        return self.version

    def healthy(self) -> bool:
        return True


@pytest.fixture
def restarted_host(monkeypatch: pytest.MonkeyPatch, tmp_path) -> host_module.EngineHost:
    monkeypatch.setattr(host_module, "make_engine", lambda *a, **k: _FakeEngine())
    monkeypatch.setattr(host_module, "_vocab_size", lambda model_path: 0)
    host = host_module.EngineHost("hf", "unused", EngineConfig())
    weights = tmp_path / "v3.safetensors"
    weights.write_bytes(b"")
    host._restore = (3, str(weights))  # as Ray's restart leaves it: it served v3
    return host


def test_a_newer_load_is_not_overwritten_by_the_restore(restarted_host: host_module.EngineHost, tmp_path) -> None:
    """The trainer's next sync reached the restarted host first; the next request then
    restored v3 over it and the engine served (and reported) the older weights."""
    newer = tmp_path / "v4.safetensors"
    newer.write_bytes(b"")

    async def scenario() -> tuple[int, GenerationResult]:
        loaded = await restarted_host.load_weights(4, str(newer))
        return loaded, await restarted_host.generate([1, 2], SamplingParams(), "r0")

    loaded, result = asyncio.run(scenario())
    assert loaded == 4
    assert result.weight_version == 4 and restarted_host.weight_version() == 4
    assert restarted_host.engine.loads == [4]


def test_requests_arriving_during_the_restore_wait_for_it(restarted_host: host_module.EngineHost) -> None:
    """Only the first request waited for the restore; the others went to the engine at once
    and were served by the initial weights."""

    async def scenario() -> list[GenerationResult]:
        return list(await asyncio.gather(*(restarted_host.generate([1, 2], SamplingParams(), f"r{i}")
                                           for i in range(4))))

    results = asyncio.run(scenario())
    assert [r.weight_version for r in results] == [3, 3, 3, 3]
    assert restarted_host.engine.loads == [3]
