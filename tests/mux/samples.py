"""Small random training batches for trainer-slot tests."""

from __future__ import annotations

import torch

from roll_agentic.mux.phase_board import PhaseBoard
from roll_agentic.train.trainer import Sample


def random_samples(seed: int) -> list[Sample]:
    """Four 12-token samples, the last 6 tokens generated, advantages +-1."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(4):
        ids = torch.randint(4, 500, (12,), generator=g).tolist()
        out.append(Sample(ids, [0] * 6 + [1] * 6, [-1.0] * 12, 1.0 if i % 2 else -1.0))
    return out


def trainer_state(slot) -> tuple[dict, dict, float]:
    """The active job's engine weights, optimizer state and step-size multiplier, copied."""
    tr = slot.trainer
    opt = {k: {n: v.clone() for n, v in s.items()} for k, s in tr.optimizer.state_dict()["state"].items()}
    return {k: v.clone() for k, v in tr.engine_state_dict().items()}, opt, tr.trust.mult


def assert_same_state(got: tuple[dict, dict, float], want: tuple[dict, dict, float]) -> None:
    """Bitwise: the weights, every optimizer slot, and the multiplier."""
    assert got[0].keys() == want[0].keys()
    for k, v in want[0].items():
        assert torch.equal(got[0][k], v), k
    assert got[1].keys() == want[1].keys()
    for k, s in want[1].items():
        for n, v in s.items():
            assert torch.equal(got[1][k][n], v), (k, n)
    assert got[2] == want[2]


def one_node_board() -> PhaseBoard:
    """A phase board of one rollout node `r` and one training node `t`."""
    b = PhaseBoard()
    b.add_node("r", "rollout")
    b.add_node("t", "train")
    return b
