"""Two data-parallel trainer workers (gloo) against one in-process trainer."""

import pytest
import ray
import torch

from roll_agentic.cluster import init_ray
from roll_agentic.config import AlgoConfig, RayConfig, TrainerConfig
from roll_agentic.train.parallel import DataParallelTrainer, shard_samples
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import DP_WEIGHT_TOLERANCE, random_batch


def test_sharding_keeps_every_sample_once():
    samples = random_batch(0, 11)
    shards = shard_samples(samples, 3)
    assert sorted(id(s) for sh in shards for s in sh) == sorted(id(s) for s in samples)
    assert max(len(s) for s in shards) - min(len(s) for s in shards) <= 2
    # FSDP: equal counts, topped up with padding that carries no loss.
    fsdp = shard_samples(samples, 3, equal_counts=True)
    assert [len(s) for s in fsdp] == [4, 4, 4]
    assert sorted(id(s) for sh in fsdp for s in sh if not s.padding) == sorted(id(s) for s in samples)
    pads = [s for sh in fsdp for s in sh if s.padding]
    assert len(pads) == 1 and not any(pads[0].loss_mask)
    assert [len(s) for s in shard_samples(samples[:1], 2, equal_counts=True)] == [1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    {},
    {"target_kl": 1e-9},  # every step's KL shrinks the next one's rate
    {"loss_agg": "seq_mean_token_mean"},  # divided by the trajectories of both shards
])
def test_two_workers_stay_bitwise_equal_and_match_one_process(tiny_model_path, options):
    init_ray(RayConfig(num_cpus=4))
    try:
        cfg = TrainerConfig(lr=1e-2, num_workers=2, micro_batch_size=4)
        dp = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig(**options))
        single = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=4), AlgoConfig(**options))
        for step in range(3):
            batch = random_batch(step)
            m_dp = dp.train_step(batch)
            m_single = single.train_step(batch)
            a, b = dp.parameters_per_worker()
            assert torch.equal(a, b), f"workers diverged at step {step}"
            assert m_dp["train/tokens"] == m_single["train/tokens"]
            assert m_dp["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-4, abs=1e-6)
            assert m_dp["train/lr"] == m_single["train/lr"]  # the KL is summed over both workers
            assert m_dp["train/step_kl"] == pytest.approx(m_single["train/step_kl"], rel=1e-3, abs=1e-12)
        ref = torch.cat([p.detach().reshape(-1) for p in single.model.parameters()])
        # same maths, different float summation order: close, not identical (batches.py)
        assert (a - ref).abs().max().item() < DP_WEIGHT_TOLERANCE
        dp.close()
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_trainer_resources_name_cpus_as_the_pools_do(tiny_model_path):
    """trainer.resources={CPU: 1}: Ray refuses "CPU"/"GPU" inside `resources`; they are
    lifted into num_cpus/num_gpus (engine/placement.py), as for pools and env workers."""
    init_ray(RayConfig(num_cpus=4))
    dp = None
    try:
        dp = DataParallelTrainer(tiny_model_path, TrainerConfig(num_workers=2, micro_batch_size=4,
                                                                resources={"CPU": 1}), AlgoConfig())
        assert dp.train_step(random_batch(0, 5))["train/samples"] == 5
        assert ray.available_resources().get("CPU", 0.0) == pytest.approx(2.0)  # 4 - one per worker
    finally:
        if dp is not None:
            dp.close()
        ray.shutdown()
