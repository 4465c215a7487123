"""Random training batches for the trainer tests (no Ray here: test_cuda.py runs without it)."""

import torch

from roll_agentic.train.trainer import Sample


def random_batch(seed: int, n: int = 10) -> list[Sample]:
    """`n` samples of 8-12 tokens, the first 4 a prompt, advantages -1, 0 and 1 in turn."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 8 + i % 5
        ids = torch.randint(5, 300, (length,), generator=g).tolist()
        mask = [0] * 4 + [1] * (length - 4)
        old = [0.0] * 4 + (-torch.rand(length - 4, generator=g) * 6).tolist()
        out.append(Sample(ids, mask, old, advantage=float(i % 3) - 1.0))
    return out
