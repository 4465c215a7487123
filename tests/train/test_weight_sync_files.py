"""The publisher's bookkeeping, with fake engines (no Ray): which weights files it keeps, and
what it says and does when engines fail to load a version (train/weight_sync.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
import torch

from roll_agentic.train import weight_sync
from roll_agentic.train.weight_sync import WeightPublisher

STATE = {"w": torch.zeros(4)}


class _Engine:
    """`load_weights.remote` answers at once: the version, or the error `ray.get` raises."""

    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.load_weights = SimpleNamespace(remote=self._load)

    def _load(self, version: int, path: str) -> int | Exception:
        if self.fail is not None:
            return self.fail
        assert Path(path).exists()
        return version


def _get(ref, timeout=None):
    if isinstance(ref, Exception):
        raise ref
    return ref


def _refused(message: str) -> Exception:
    """What `ray.get` raises for an error the actor's load_weights raised."""
    return ray.exceptions.RayTaskError("load_weights", f"Traceback (most recent call last):\n  ...\n"
                                       f"ValueError: {message}", ValueError(message)).as_instanceof_cause()


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list[_Engine]:
    monkeypatch.setattr(weight_sync.ray, "get", _get)
    return [_Engine(), _Engine()]


def _publisher(engines: list[_Engine], name: str):
    return WeightPublisher(engines, f"{name}-test")


def _kept(publisher: WeightPublisher) -> list[str]:
    return sorted(p.name for p in publisher.dir.glob("*.safetensors"))


def test_a_version_some_engine_may_restore_from_is_kept(engines: list[_Engine]) -> None:
    """An engine failed to load v2, so its restore record still named v1; the publisher deleted
    v1 anyway, and the engine Ray restarted found no file and served its initial weights as v0."""
    publisher = _publisher(engines, "keep")
    try:
        publisher.publish(1, STATE)
        engines[1].fail = _refused("engine 1 could not read the file")
        assert publisher.publish(2, STATE)["sync/failed_engines"] == 1.0
        assert _kept(publisher) == ["weights_v1.safetensors", "weights_v2.safetensors"]
        # No answer in time: the load may still land, and a restart restore v3; v1 stays
        # too (the last load it surely made), v2 goes: no engine can restore from it.
        engines[1].fail = ray.exceptions.GetTimeoutError("no answer in time")
        publisher.publish(3, STATE)
        assert _kept(publisher) == ["weights_v1.safetensors", "weights_v3.safetensors"]
        engines[1].fail = None
        publisher.publish(4, STATE)  # every engine serves v4 now
        assert _kept(publisher) == ["weights_v4.safetensors"]
    finally:
        publisher.close()


def test_each_failed_engine_is_logged_with_its_cause(engines: list[_Engine],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    publisher = _publisher(engines, "log")
    engines[0].fail = _refused("wrong shape for 1 tensor(s):\nmodel.norm.weight (3, 3)")
    try:
        with caplog.at_level(logging.WARNING, logger=weight_sync.__name__):
            assert publisher.publish(1, STATE)["sync/failed_engines"] == 1.0
    finally:
        publisher.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "engine 0: ValueError: wrong shape for 1 tensor(s): model.norm.weight (3, 3)" in lines[0]


def test_a_version_no_engine_loads_stops_the_run_with_the_cause(engines: list[_Engine],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Counted in `sync/failed_engines`, which nothing read: the run trained on, every sample
    stale, the cause (a name or shape mismatch, the same on every engine) nowhere."""
    publisher = _publisher(engines, "all")
    for e in engines:
        e.fail = _refused("load_weights: missing ['model.norm.weight']")
    try:
        with caplog.at_level(logging.WARNING, logger=weight_sync.__name__), \
                pytest.raises(RuntimeError, match=r"engine 0: ValueError: load_weights: missing"):
            publisher.publish(1, STATE)
    finally:
        publisher.close()
    assert sum("engine 1: ValueError" in r.getMessage() for r in caplog.records) == 1


def test_engines_restarting_through_a_sync_do_not_stop_the_run(engines: list[_Engine]) -> None:
    """Not refused, only away (an engine actor restarting, as a fault run's engine_die makes
    it): the restarted engine restores this file, so the run goes on (it was stopped)."""
    publisher = _publisher(engines, "restarting")
    for e in engines:
        e.fail = ray.exceptions.GetTimeoutError("no answer in time")
    try:
        out = publisher.publish(1, STATE)
        assert out["sync/failed_engines"] == 2.0
        assert _kept(publisher) == ["weights_v1.safetensors"]  # what they restore from
    finally:
        publisher.close()
