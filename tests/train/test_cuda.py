"""The trainer on a GPU; skipped where torch sees no CUDA device (CI has none).

Plain: the CUDA trainer takes the CPU trainer's steps. Sharded: FSDP2 on one
NCCL rank, the path `trainer.strategy=fsdp` takes on each GPU worker, against
the plain CUDA trainer under the same process group, and resumed from its own
checkpoint. No Ray here: the process group is built by the test, so this file
runs where only torch and transformers are installed.
"""

import socket

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.fsdp import shard_model
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import random_batch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# A reference model (kl_coef) and a KL-adapted rate (target_kl) put every
# collective and every device transfer of a step on the path.
ALGO = AlgoConfig(kl_coef=0.01, target_kl=1e-9)


def _trainer(path: str, device: str) -> PolicyTrainer:
    return PolicyTrainer(path, TrainerConfig(lr=1e-2, micro_batch_size=4, device=device), ALGO)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_cuda_trainer_takes_the_cpu_trainers_steps(tiny_model_path):
    gpu, cpu = _trainer(tiny_model_path, "cuda"), _trainer(tiny_model_path, "cpu")
    for step in range(3):
        m_gpu, m_cpu = gpu.train_step(random_batch(step)), cpu.train_step(random_batch(step))
        assert m_gpu["train/tokens"] == m_cpu["train/tokens"]
        assert m_gpu["train/loss"] == pytest.approx(m_cpu["train/loss"], rel=1e-4, abs=1e-7)
        assert m_gpu["train/lr"] == pytest.approx(m_cpu["train/lr"], rel=1e-3)
    weights = gpu.engine_state_dict()
    assert all(w.device.type == "cpu" for w in weights.values())  # what engines and checkpoints take
    assert _max_diff(weights, cpu.engine_state_dict()) < 1e-3


@pytest.fixture
def nccl_rank():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_fsdp_rank_matches_the_plain_trainer_and_resumes(tiny_model_path, nccl_rank):
    sharded, plain = _trainer(tiny_model_path, "cuda"), _trainer(tiny_model_path, "cuda")
    shard_model(sharded)
    for step in range(2):
        m_sharded, m_plain = sharded.train_step(random_batch(step)), plain.train_step(random_batch(step))
        assert m_sharded["train/loss"] == pytest.approx(m_plain["train/loss"], rel=1e-5, abs=1e-7)
        assert m_sharded["train/grad_norm"] == pytest.approx(m_plain["train/grad_norm"], rel=1e-4)
    weights = sharded.engine_state_dict()
    assert all(w.device.type == "cpu" for w in weights.values())
    assert _max_diff(weights, plain.engine_state_dict()) < 1e-5

    state = sharded.state()
    resumed = _trainer(tiny_model_path, "cuda")
    shard_model(resumed)
    resumed.load_state(state, weights)
    m_resumed, m_plain = resumed.train_step(random_batch(2)), plain.train_step(random_batch(2))
    assert m_resumed["train/loss"] == pytest.approx(m_plain["train/loss"], rel=1e-5, abs=1e-7)
    assert m_resumed["train/lr"] == pytest.approx(m_plain["train/lr"], rel=1e-3)
