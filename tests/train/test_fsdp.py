"""trainer.strategy=fsdp: two FSDP2-sharded workers (gloo, CPU) against one plain process.

The sharded path must be the same maths as the plain one (the loss is summed,
not averaged, across shards), publish whole weights to the engines, and save
and resume its optimizer state. The same checks on a GPU: test_cuda.py.
"""

import pytest
import ray
import torch

from roll_agentic.cluster import init_ray
from roll_agentic.config import AlgoConfig, RayConfig, TrainerConfig
from roll_agentic.train.parallel import DataParallelTrainer
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import random_batch


@pytest.mark.slow
def test_two_fsdp_workers_match_one_process_and_resume(tiny_model_path):
    init_ray(RayConfig(num_cpus=4))
    cfg = TrainerConfig(lr=1e-2, num_workers=2, micro_batch_size=4, strategy="fsdp")
    single = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=4), AlgoConfig())
    dp = resumed = None
    try:
        dp = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        for step in range(2):
            m_dp, m_single = dp.train_step(random_batch(step)), single.train_step(random_batch(step))
            assert m_dp["train/tokens"] == m_single["train/tokens"]
            assert m_dp["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-5)
            assert m_dp["train/grad_norm"] == pytest.approx(m_single["train/grad_norm"], rel=1e-4)
        a, b = dp.parameters_per_worker()  # gathered from the shards: whole on both ranks
        ref = torch.cat([p.detach().reshape(-1) for p in single.model.parameters()])
        assert torch.equal(a, b) and a.shape == ref.shape
        assert (a - ref).abs().max().item() < 1e-4

        # What engines load: whole tensors under Hugging Face names, as without FSDP.
        weights, plain = dp.engine_state_dict(), single.engine_state_dict()
        assert weights.keys() == plain.keys()
        assert all(weights[k].shape == plain[k].shape for k in plain)
        assert max((weights[k] - plain[k]).abs().max().item() for k in plain) < 1e-4

        # A checkpoint (rank-independent) resumes into fresh sharded workers: the next
        # step is the one the uninterrupted plain trainer takes.
        state = dp.state()
        assert state["step"] == 2 and state["optimizer"]["state"]
        dp.close()
        dp = None
        resumed = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        resumed.load_state(state, weights)
        m_resumed, m_single = resumed.train_step(random_batch(2)), single.train_step(random_batch(2))
        assert m_resumed["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-4)
        assert m_resumed["train/grad_norm"] == pytest.approx(m_single["train/grad_norm"], rel=1e-3)
    finally:
        for t in (dp, resumed):
            if t is not None:
                t.close()
        ray.shutdown()
