"""What one request costs on each hardware class: the phase-aware router's arithmetic.

An engine of a class prefills at `prefill_tokens_per_s`, decodes at
`decode_tokens_per_s` and is paid `price_per_hour` whether busy or not, so a
request that holds it for t seconds costs price/3600 * t, with

    t = prefill / prefill_speed + decode / decode_speed.

Compute-rich GPUs (H800-class) prefill fast; bandwidth-rich ones (H20-class)
decode cheaply. Which class is cheaper therefore depends on the request's
prefill:decode mix, not on its size: a many-turn task with a long growing
context is prefill-heavy, a long-answer task decode-heavy (RollArt R1).

A pool may be billed at its own price (pools[].price_per_hour: spot and
on-demand engines of one class, or a provider's real rate), which then
stands in for its class's: the seconds come from the class, the dollars from
what that pool's engines cost. A price of 0 is "not given" (the config's
default), never "free": a free pool would win every request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


class HardwareSpec(Protocol):
    """Anything with the three figures (config.HardwareClassConfig satisfies it)."""

    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    price_per_hour: float


@dataclass(frozen=True)
class HardwareClass:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    price_per_hour: float

    def __post_init__(self) -> None:
        if self.prefill_tokens_per_s <= 0 or self.decode_tokens_per_s <= 0:
            raise ValueError(f"hardware speeds must be > 0, got prefill={self.prefill_tokens_per_s} "
                             f"decode={self.decode_tokens_per_s}")
        if self.price_per_hour < 0:
            raise ValueError(f"price_per_hour must be >= 0, got {self.price_per_hour}")

    def seconds(self, prefill_tokens: float, decode_tokens: float) -> float:
        return prefill_tokens / self.prefill_tokens_per_s + decode_tokens / self.decode_tokens_per_s

    def cost(self, prefill_tokens: float, decode_tokens: float, price_per_hour: float = 0.0) -> float:
        """Dollars of engine time one request with this mix occupies, at `price_per_hour` when
        given (> 0: the pool's own price), else at the class's."""
        price = price_per_hour if price_per_hour > 0 else self.price_per_hour
        return price / 3600.0 * self.seconds(prefill_tokens, decode_tokens)


@dataclass(frozen=True)
class RequestMix:
    prefill_tokens: float
    decode_tokens: float


@dataclass
class CostModel:
    """Hardware classes by name; classes not listed cannot be costed (None)."""

    classes: dict[str, HardwareClass] = field(default_factory=dict)

    @classmethod
    def from_specs(cls, specs: Mapping[str, HardwareSpec]) -> CostModel:
        return cls({name: HardwareClass(float(s.prefill_tokens_per_s), float(s.decode_tokens_per_s),
                                        float(s.price_per_hour)) for name, s in specs.items()})

    @classmethod
    def from_dicts(cls, specs: Mapping[str, Mapping[str, float]]) -> CostModel:
        """From plain dicts, as a config dict or a Ray actor argument carries them."""
        return cls({name: HardwareClass(float(s["prefill_tokens_per_s"]), float(s["decode_tokens_per_s"]),
                                        float(s["price_per_hour"])) for name, s in specs.items()})

    def cost(self, hardware: str, mix: RequestMix, price_per_hour: float = 0.0) -> float | None:
        hw = self.classes.get(hardware)
        return None if hw is None else hw.cost(mix.prefill_tokens, mix.decode_tokens, price_per_hour)

    def cheapest(self, candidates: Mapping[str, str], mix: RequestMix,
                 pool_prices: Mapping[str, float] | None = None) -> tuple[str | None, dict[str, float]]:
        """The cheapest of `candidates` (pool -> hardware class) for `mix`, and every pool's cost.

        `pool_prices` (pool -> $/engine-hour, 0 or absent: not given) prices a
        pool's time in place of its class's price. Pools whose class the model
        does not know are left out; ties keep the first candidate in order, so
        the caller decides who wins a tie.
        """
        costs: dict[str, float] = {}
        prices = pool_prices or {}
        for pool, hardware in candidates.items():
            c = self.cost(hardware, mix, prices.get(pool, 0.0))
            if c is not None:
                costs[pool] = c
        if not costs:
            return None, costs
        best = min(costs, key=lambda p: costs[p])  # min keeps the first of equal costs
        return best, costs

    def break_even_ratio(self, a: str, b: str) -> float | None:
        """The prefill:decode token ratio at which classes `a` and `b` cost the same.

        On one side of it `a` is cheaper, on the other `b`; None when they never
        cost the same (one class is cheaper for every mix). Explains routing decisions.
        """
        ha, hb = self.classes.get(a), self.classes.get(b)
        if ha is None or hb is None:
            return None
        pa, pb = ha.price_per_hour, hb.price_per_hour
        # cost per decode token is p*(r/ps + 1/ds); solve pa*(r/psa + 1/dsa) = pb*(r/psb + 1/dsb)
        slope = pa / ha.prefill_tokens_per_s - pb / hb.prefill_tokens_per_s
        offset = pb / hb.decode_tokens_per_s - pa / ha.decode_tokens_per_s
        if slope == 0:
            return None
        r = offset / slope
        return r if r > 0 else None
