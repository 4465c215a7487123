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
from tests.train.batches import DP_WEIGHT_TOLERANCE, random_batch


@pytest.mark.slow
def test_two_fsdp_workers_match_one_process_and_resume(tiny_model_path):
    init_ray(RayConfig(num_cpus=4))
    cfg = TrainerConfig(lr=1e-2, num_workers=2, micro_batch_size=4, strategy="fsdp")
    single = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=4), AlgoConfig())
    dp = resumed = None
    try:
        dp = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        # Batches that split unevenly over micro-batches of 4 (11 samples: 6 + 5), a
        # batch streamed in two parts (3, then 6), and one sample: one rank gets only
        # padding. Ranks running different numbers of passes would hang here.
        for step, parts in enumerate(([11], [3, 6], [1])):
            batch = random_batch(step, sum(parts))
            if len(parts) == 1:
                m_dp, m_single = dp.train_step(batch), single.train_step(batch)
            else:
                for t in (dp, single):
                    t.accumulate(batch[:parts[0]])
                    t.accumulate(batch[parts[0]:])
                m_dp, m_single = dp.apply(), single.apply()
                dp.step += 1
                single.step += 1
            assert m_dp["train/tokens"] == m_single["train/tokens"]
            assert m_dp["train/samples"] == m_single["train/samples"] == sum(parts)  # padding not counted
            assert m_dp["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-5)
            assert m_dp["train/grad_norm"] == pytest.approx(m_single["train/grad_norm"], rel=1e-4)
        a, b = dp.parameters_per_worker()  # gathered from the shards: whole on both ranks
        ref = torch.cat([p.detach().reshape(-1) for p in single.model.parameters()])
        assert torch.equal(a, b) and a.shape == ref.shape
        assert (a - ref).abs().max().item() < DP_WEIGHT_TOLERANCE

        # What engines load: whole tensors under Hugging Face names, as without FSDP.
        weights, plain = dp.engine_state_dict(), single.engine_state_dict()
        assert weights.keys() == plain.keys()
        assert all(weights[k].shape == plain[k].shape for k in plain)
        assert max((weights[k] - plain[k]).abs().max().item() for k in plain) < DP_WEIGHT_TOLERANCE

        # A checkpoint (rank-independent) resumes into fresh sharded workers: the next
        # step is the one the uninterrupted plain trainer takes.
        state = dp.state()
        assert state["step"] == 3 and state["optimizer"]["state"]
        dp.close()
        dp = None
        resumed = DataParallelTrainer(tiny_model_path, cfg, AlgoConfig())
        resumed.load_state(state, weights)
        m_resumed, m_single = resumed.train_step(random_batch(3, 7)), single.train_step(random_batch(3, 7))
        assert m_resumed["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-4)
        assert m_resumed["train/grad_norm"] == pytest.approx(m_single["train/grad_norm"], rel=1e-3)
    finally:
        for t in (dp, resumed):
            if t is not None:
                t.close()
        ray.shutdown()


@pytest.mark.slow
def test_fsdp_workers_resume_a_checkpoint_of_a_plain_run(tiny_model_path, tmp_path):
    """One worker in the driver saves torch's optimizer format (keyed by position); FSDP's
    loader reads names. Switching to FSDP workers on resume (more workers, bigger
    machine) must carry Adam's moments over, not fail or restart them."""
    from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    cfg = TrainerConfig(lr=1e-2, micro_batch_size=3, lr_schedule="constant")
    plain, straight = PolicyTrainer(tiny_model_path, cfg, AlgoConfig()), PolicyTrainer(tiny_model_path, cfg, AlgoConfig())
    for s in range(2):
        plain.train_step(random_batch(s, 6))
        straight.train_step(random_batch(s, 6))
    save_checkpoint(tmp_path, plain.step, plain.engine_state_dict(), plain.state(), {"buffer": {}})
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    init_ray(RayConfig(num_cpus=4))
    dp = None
    try:
        dp = DataParallelTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=3, lr_schedule="constant",
                                                                num_workers=2, strategy="fsdp"), AlgoConfig())
        dp.load_state(state, weights)
        m_dp, m_straight = dp.train_step(random_batch(2, 6)), straight.train_step(random_batch(2, 6))
        assert m_dp["train/loss"] == pytest.approx(m_straight["train/loss"], rel=1e-5)
        a, b = dp.engine_state_dict(), straight.engine_state_dict()
        # Restarted moments would move every weight by about lr (1e-2) instead.
        assert max((a[k] - b[k]).abs().max().item() for k in b) < 1e-6
        assert dp.state()["step"] == 3
    finally:
        if dp is not None:
            dp.close()
        ray.shutdown()
