"""Per-function meters and what the same usage would cost on AWS Lambda.

Lambda bills $0.20 per million requests plus $0.0000166667 per GB-second,
the duration rounded up to the millisecond and multiplied by MemorySize.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

PRICE_PER_REQUEST = 0.20 / 1_000_000
PRICE_PER_GB_S = 0.0000166667
_WINDOW = 10_000  # durations kept for the percentiles (the most recent ones)


def billed_ms(duration_ms: float) -> int:
    return max(1, math.ceil(duration_ms))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class FunctionMeter:
    invocations: int = 0
    cold_starts: int = 0
    throttles: int = 0
    errors: int = 0
    timeouts: int = 0
    event_retries: int = 0
    async_events_dropped: int = 0  # Events given up after too many throttles (AWS: AsyncEventsDropped)
    billed_ms_total: int = 0
    gb_s: float = 0.0
    durations_ms: deque = field(default_factory=lambda: deque(maxlen=_WINDOW))
    init_ms: deque = field(default_factory=lambda: deque(maxlen=_WINDOW))

    def record(self, duration_ms: float, memory_mb: int, cold: bool, init_ms: float, error: bool) -> int:
        """Counts one invocation that ran; returns its billed milliseconds."""
        billed = billed_ms(duration_ms)
        self.invocations += 1
        self.errors += int(error)
        self.billed_ms_total += billed
        self.gb_s += billed / 1000.0 * memory_mb / 1024.0
        self.durations_ms.append(duration_ms)
        if cold:
            self.cold_starts += 1
            self.init_ms.append(init_ms)
        return billed

    @property
    def cost_usd(self) -> float:
        return self.invocations * PRICE_PER_REQUEST + self.gb_s * PRICE_PER_GB_S

    def snapshot(self) -> dict:
        d = list(self.durations_ms)
        return {
            "invocations": self.invocations,
            "cold_starts": self.cold_starts,
            "throttles": self.throttles,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "event_retries": self.event_retries,
            "async_events_dropped": self.async_events_dropped,
            "duration_ms_p50": round(percentile(d, 50), 3),
            "duration_ms_p90": round(percentile(d, 90), 3),
            "duration_ms_p99": round(percentile(d, 99), 3),
            "init_ms_p50": round(percentile(list(self.init_ms), 50), 3),
            "billed_ms": self.billed_ms_total,
            "gb_s": round(self.gb_s, 6),
            "cost_usd": round(self.cost_usd, 9),
        }


class Meters:
    def __init__(self) -> None:
        self.functions: dict[str, FunctionMeter] = {}

    def of(self, name: str) -> FunctionMeter:
        m = self.functions.get(name)
        if m is None:
            m = self.functions[name] = FunctionMeter()
        return m

    def snapshot(self) -> dict:
        per = {n: m.snapshot() for n, m in sorted(self.functions.items())}
        return {
            "functions": per,
            "total": {
                "invocations": sum(m.invocations for m in self.functions.values()),
                "gb_s": round(sum(m.gb_s for m in self.functions.values()), 6),
                "cost_usd": round(sum(m.cost_usd for m in self.functions.values()), 9),
            },
        }
