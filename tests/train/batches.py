"""Random training batches for the trainer tests (no Ray here: test_cuda.py runs without it)."""

import torch

from roll_agentic.train.trainer import Sample

# How far data-parallel weights may drift from one process's after a few AdamW steps at lr 1e-2:
# the same maths in another float summation order. Adam divides each gradient by its own root
# mean square, so on a parameter whose gradient is near 0 an order difference can move it by up
# to a step's lr. Measured: 1.4e-4 to 1.8e-4 on some CPUs (1e-4 held on others); a wrong update
# (a lost shard, Adam's moments restarted) moves weights by ~lr = 1e-2, 20x this bound.
DP_WEIGHT_TOLERANCE = 5e-4


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
