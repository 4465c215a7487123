import os

import pytest
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.trainer import PolicyTrainer, Sample


def _batch(seed: int, n: int = 8) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(5, 300, (12,), generator=g).tolist()
        mask = [0] * 6 + [1] * 6
        old = [0.0] * 6 + (-torch.rand(6, generator=g) * 6).tolist()
        out.append(Sample(ids, mask, old, advantage=1.0 if i % 2 else -1.0))
    return out


def _trainer(path):
    return PolicyTrainer(path, TrainerConfig(lr=1e-2, micro_batch_size=3), AlgoConfig())


def test_resume_equals_the_uninterrupted_next_step(tiny_model_path, tmp_path):
    straight = _trainer(tiny_model_path)
    for s in range(3):
        straight.train_step(_batch(s))

    first = _trainer(tiny_model_path)
    for s in range(2):
        first.train_step(_batch(s))
    save_checkpoint(tmp_path, first.step, first.engine_state_dict(), first.state(), {"buffer": {}})
    del first

    resumed = _trainer(tiny_model_path)
    weights, state, run = load_checkpoint(latest_checkpoint(tmp_path))
    resumed.load_state(state, weights)
    assert resumed.step == 2 and run["step"] == 2
    resumed.train_step(_batch(2))
    a = straight.model.state_dict()
    b = resumed.model.state_dict()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-6


def test_micro_batching_does_not_change_the_update(tiny_model_path):
    one = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=8), AlgoConfig())
    many = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, micro_batch_size=2), AlgoConfig())
    batch = _batch(7)
    one.accumulate(batch)
    many.accumulate(batch)
    worst = max((p.grad - q.grad).abs().max().item()
                for p, q in zip(one.model.parameters(), many.model.parameters(), strict=True))
    scale = max(p.grad.abs().max().item() for p in one.model.parameters())
    assert worst <= 1e-5 * scale  # same gradient up to float summation order


def test_half_written_checkpoint_is_never_loaded(tmp_path):
    w = {"x": torch.ones(2)}
    save_checkpoint(tmp_path, 1, w, {"step": 1}, {})
    # a crash while writing step 2: its temp dir exists, `latest` still names step 1
    broken = tmp_path / f"step_000002.tmp-{os.getpid() + 1}"
    broken.mkdir()
    (broken / "weights.safetensors").write_bytes(b"\x00garbage")
    assert latest_checkpoint(tmp_path).name == "step_000001"
    # even with a lost pointer, only complete checkpoints count
    (tmp_path / "latest").unlink()
    assert latest_checkpoint(tmp_path).name == "step_000001"


def test_keep_prunes_old_checkpoints(tmp_path):
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, {"x": torch.full((1,), float(step))}, {"step": step}, {}, keep=2)
    names = sorted(p.name for p in tmp_path.glob("step_*"))
    assert names == ["step_000003", "step_000004"]
    weights, _, _ = load_checkpoint(latest_checkpoint(tmp_path))
    assert weights["x"].item() == 4.0


def test_a_decaying_lr_resumes_at_the_rate_of_the_uninterrupted_run(tiny_model_path, tmp_path):
    cfg = dict(lr=1e-2, micro_batch_size=3, total_steps=4, lr_schedule="cosine", lr_min_ratio=0.1)
    straight = PolicyTrainer(tiny_model_path, TrainerConfig(**cfg), AlgoConfig())
    rates = []
    for s in range(3):
        rates.append(straight.train_step(_batch(s))["train/lr"])
    assert rates == pytest.approx([1e-2, 1e-2 * (0.1 + 0.9 * 0.75), 1e-2 * (0.1 + 0.9 * 0.25)])  # 0, 1/3, 2/3 of pi

    first = PolicyTrainer(tiny_model_path, TrainerConfig(**cfg), AlgoConfig())
    for s in range(2):
        first.train_step(_batch(s))
    save_checkpoint(tmp_path, first.step, first.engine_state_dict(), first.state(), {"buffer": {}})
    resumed = PolicyTrainer(tiny_model_path, TrainerConfig(**cfg), AlgoConfig())
    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    resumed.load_state(state, weights)
    assert resumed.train_step(_batch(2))["train/lr"] == rates[2]
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6


def test_a_streamed_step_takes_the_rate_of_the_step_it_is_told(tiny_model_path):
    cfg = TrainerConfig(lr=1e-2, micro_batch_size=3, total_steps=3, lr_schedule="linear", lr_min_ratio=0.0)
    trainer = PolicyTrainer(tiny_model_path, cfg, AlgoConfig())
    trainer.accumulate(_batch(0))
    assert trainer.apply(step=1)["train/lr"] == 5e-3  # halfway down a linear decay to 0
    assert trainer.optimizer.param_groups[0]["lr"] == 5e-3
