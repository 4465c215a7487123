"""Small random training batches for trainer-slot tests."""

from __future__ import annotations

import torch

from roll_agentic.train.trainer import Sample


def random_samples(seed: int) -> list[Sample]:
    """Four 12-token samples, the last 6 tokens generated, advantages +-1."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(4):
        ids = torch.randint(4, 500, (12,), generator=g).tolist()
        out.append(Sample(ids, [0] * 6 + [1] * 6, [-1.0] * 12, 1.0 if i % 2 else -1.0))
    return out
