"""What the engine contract tests drive an engine with (`test_engine_contract.py`): an
event loop in a thread, a harness over one engine, and the trainer side of weight syncs."""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from roll_agentic.engine.protocol import GenerationResult, RolloutEngine, SamplingParams

_ids = itertools.count()


class EngineLoop:
    """An event loop in a daemon thread; `run` submits a coroutine and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 300) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Harness:
    backend: str
    engine: RolloutEngine
    loop: EngineLoop
    model_dir: Path
    vocab: int

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 300) -> Any:
        return self.loop.run(coro, timeout)

    def gen_all(self, requests: list[tuple[list[int], SamplingParams, str]]) -> list[GenerationResult]:
        async def all_of() -> list[GenerationResult]:
            return list(await asyncio.gather(*(self.engine.generate(*r) for r in requests)))

        return self.run(all_of())

    def gen(self, tokens: list[int], sampling: SamplingParams, rid: str | None = None) -> GenerationResult:
        return self.run(self.engine.generate(tokens, sampling, rid or f"t{next(_ids)}"))


def engine_children() -> list[str]:
    import psutil

    names = []
    for c in psutil.Process().children(recursive=True):
        try:
            names.append(c.name())
        except psutil.NoSuchProcess:
            pass
    return [n for n in names if n.startswith("VLLM")]


# -- weights helpers (trainer side) -------------------------------------------------
def hf_model(model_dir: Path, state: dict[str, torch.Tensor] | None = None):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state, strict=False)
    return model


def perturbed_state(model_dir: Path, seed: int, scale: float = 0.1) -> dict[str, torch.Tensor]:
    """The base weights plus noise, as a trainer step would change them."""
    g = torch.Generator().manual_seed(seed)
    sd = hf_model(model_dir).state_dict()
    return {k: (v + scale * torch.randn(v.shape, generator=g)).contiguous() for k, v in sd.items()
            if k != "lm_head.weight"}  # tied to embed_tokens: safetensors refuses shared storage


def save_weights(state: dict[str, torch.Tensor], with_head: bool) -> str:
    from safetensors.torch import save_file

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    d = tempfile.mkdtemp(prefix="roll-weights-", dir=base)
    out = dict(state)
    if with_head:  # a trainer's state_dict() carries the tied head too
        out["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    path = os.path.join(d, "weights.safetensors")
    save_file(out, path)
    return path


@torch.no_grad()
def recompute(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """Trainer-style logprobs: one forward over prompt+response, log_softmax at the
    positions that predict each generated token."""
    ids = torch.tensor([prompt + tokens])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1).tolist()


def mean_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def load_weights(h: Harness, path: str) -> int:
    version = h.engine.weight_version() + 1
    h.run(h.engine.load_weights(version, path))
    return version
