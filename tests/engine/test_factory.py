"""Choosing the rollout engine: an unknown backend is an error, never the HF engine."""

from __future__ import annotations

import pytest

from roll_agentic.config import EngineConfig
from roll_agentic.engine.factory import make_engine, resolve_backend


@pytest.mark.parametrize("backend", ["tpu", "vLLM", "HF", ""])
def test_an_unknown_backend_is_refused_naming_the_valid_ones(backend, monkeypatch):
    import roll_agentic.engine.hf_engine as hf_engine

    # Were the HF engine built, the test would say so instead of loading a model.
    monkeypatch.setattr(hf_engine, "HFEngine", lambda *a, **k: pytest.fail(f"built the HF engine for {backend!r}"))
    with pytest.raises(ValueError, match=f"expected one of auto, vllm, hf, got {backend!r}"):
        make_engine(backend, "unused", EngineConfig())
    with pytest.raises(ValueError, match="expected one of auto, vllm, hf"):
        resolve_backend(backend)


def test_known_backends_resolve():
    assert resolve_backend("hf") == "hf"
    assert resolve_backend("auto") in ("hf", "vllm")
