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

    def __post_init__(self) -> None:
        # Refused where the request is made: vLLM refused these only once the request was
        # admitted, and the hf engine answered max_tokens <= 0 with an empty "length" reply
        # and temperature < 0 with nan probabilities.
        if not self.max_tokens >= 1:
            raise ValueError(f"SamplingParams.max_tokens: expected an integer >= 1, got {self.max_tokens!r}")
        if not self.temperature >= 0:  # also refuses nan
            raise ValueError(f"SamplingParams.temperature: expected a number >= 0 (0 = greedy), "
                             f"got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p: expected a number in (0, 1], got {self.top_p!r}")


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
