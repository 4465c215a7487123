"""The rollout-engine seam: one request in, its tokens and logprobs out.

Two implementations pass the same test suite (tests/engine/): `VLLMEngine`,
the default wherever vLLM imports, and `HFEngine`, a plain torch engine for
fast tests. Token ids in, token ids out: engines never see text, so a
multi-turn conversation is never re-tokenised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class GenerationResult:
    token_ids: list[int]
    logprobs: list[float]  # sampling logprob of each generated token
    finish_reason: str  # "stop" | "length" | "abort"
    weight_version: int  # the weights that produced these tokens
    timings: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class RolloutEngine(Protocol):
    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str) -> GenerationResult: ...

    async def abort(self, request_id: str) -> None: ...

    async def load_weights(self, version: int, source: str) -> None:
        """Loads the safetensors file at `source` and serves it as `version`."""
        ...

    def weight_version(self) -> int: ...

    async def sleep(self) -> None: ...

    async def wake(self) -> None: ...

    def stats(self) -> dict[str, float]: ...

    def healthy(self) -> bool:
        """False once the engine can never serve again (its engine process died)."""
        ...

    async def shutdown(self) -> None: ...
