"""A host Ray restarted reloads the weights it served before: once, before any request,
and never over newer weights loaded since (host.py, `_restore_weights`). When it cannot,
it refuses requests and pings until a weight load succeeds."""

from __future__ import annotations

import asyncio
import logging

import pytest

from roll_agentic.config import EngineConfig
from roll_agentic.engine import host as host_module
from roll_agentic.engine.protocol import GenerationResult, SamplingParams


class _FakeEngine:
    """Answers at once with the version it serves; a weight load takes a few loop turns."""

    def __init__(self) -> None:
        self.version = 0
        self.loads: list[int] = []
        self.fail: Exception | None = None  # the next loads raise it, nothing applied
        self.is_healthy = True

    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str) -> GenerationResult:
        return GenerationResult([1], [0.0], "length", self.version)

    async def load_weights(self, version: int, source: str) -> None:
        self.loads.append(version)
        for _ in range(5):
            await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        self.version = version

    def weight_version(self) -> int:
        return self.version

    def healthy(self) -> bool:
        return self.is_healthy


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


def _refused(host: host_module.EngineHost) -> tuple[Exception | None, Exception | None]:
    async def scenario() -> tuple[Exception | None, Exception | None]:
        out = []
        for call in (host.ping(), host.generate([1, 2], SamplingParams(), "r0")):
            try:
                await call
                out.append(None)
            except RuntimeError as err:
                out.append(err)
        return out[0], out[1]

    return asyncio.run(scenario())


@pytest.mark.parametrize("cause", ["file gone", "load fails"])
def test_a_host_that_cannot_restore_refuses_work_until_weights_load(
        restarted_host: host_module.EngineHost, tmp_path, caplog: pytest.LogCaptureFixture, cause: str) -> None:
    """The publisher had deleted the file the record named: the restore did nothing, ping said
    True, and the host served its initial weights labelled version 0 (every group dropped as
    stale; with one engine the run went round for ever)."""
    if cause == "file gone":
        (tmp_path / "v3.safetensors").unlink()
    else:
        restarted_host.engine.fail = OSError("unreadable\nheader")
    with caplog.at_level(logging.ERROR, logger=host_module.__name__):
        pinged, generated = _refused(restarted_host)
    assert pinged is not None and generated is not None
    assert "restoring weights v3 failed" in str(pinged) and "restoring weights v3 failed" in str(generated)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0] and "v3" in lines[0], lines
    restarted_host.engine.fail = None
    newer = tmp_path / "v4.safetensors"
    newer.write_bytes(b"")

    async def after_a_load() -> tuple[bool, GenerationResult]:
        await restarted_host.load_weights(4, str(newer))
        return await restarted_host.ping(), await restarted_host.generate([1, 2], SamplingParams(), "r1")

    pinged_after, result = asyncio.run(after_a_load())
    assert pinged_after and result.weight_version == 4


def test_a_failed_load_in_place_of_the_restore_leaves_the_host_refusing(
        restarted_host: host_module.EngineHost, tmp_path) -> None:
    """The newer load took the restore's place and failed: the engine held its initial weights."""
    restarted_host.engine.fail = ValueError("wrong shape")
    with pytest.raises(ValueError):
        asyncio.run(restarted_host.load_weights(4, str(tmp_path / "v3.safetensors")))
    pinged, generated = _refused(restarted_host)
    assert pinged is not None and generated is not None and "v4 failed before v3" in str(pinged)
    assert restarted_host.engine.loads == [4]


def test_an_engine_broken_by_a_failed_load_ends_its_host(restarted_host: host_module.EngineHost,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A reload that failed half way (vLLM) leaves the engine unhealthy: the host ends at once,
    and Ray restarts it from the last weights it loaded."""
    ended: list[str] = []

    async def end(why: str) -> None:
        ended.append(why)

    monkeypatch.setattr(host_module, "_weights_file", lambda: tmp_path / "record.json")  # as in an actor
    monkeypatch.setattr(restarted_host, "_end", end)
    restarted_host._restore = None
    restarted_host.engine.fail = RuntimeError("reload failed half way")
    restarted_host.engine.is_healthy = False
    with pytest.raises(RuntimeError, match="half way"):
        asyncio.run(restarted_host.load_weights(4, str(tmp_path / "v3.safetensors")))
    assert len(ended) == 1 and "half way" in ended[0]
