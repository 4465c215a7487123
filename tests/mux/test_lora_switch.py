"""LoRA jobs on a shared trainer: adapters alone are resident and switched, and each job trains as if alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from roll_agentic.config import AlgoConfig, Config, TrainerConfig
from roll_agentic.mux import admission
from roll_agentic.mux.trainer_slot import TrainerSlot, base_weights, trainer_form
from roll_agentic.train.checkpoint import latest_checkpoint
from roll_agentic.train.lora import adapter_state, merge_adapters
from tests.mux.samples import assert_same_state, random_samples, trainer_state

LORA = TrainerConfig(lr=2e-2, seed=1, lora_rank=4, lora_full_modules=["embed_tokens"])
CONFIGS = {
    "a": LORA,
    "b": replace(LORA, lr=5e-3, weight_decay=0.1, seed=2),  # same form, own hyperparameters
    "c": replace(LORA, lora_rank=2, lora_full_modules=[]),  # another form: other adapter shapes
    "full": TrainerConfig(lr=1e-2, seed=3),
}
SEEDS = {"a": 0, "b": 100, "c": 200, "full": 300}
# algo.target_kl: a's steps shrink its step size; b's stays 1 (off), whoever built the trainer.
TARGET_KL = {"a": 0.05, "b": 0.0, "c": 0.05, "full": 0.05}


def _slot(model_path: str, root: Path, jobs: list[str]) -> TrainerSlot:
    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    for job in jobs:
        slot.register(job, model_path, CONFIGS[job], AlgoConfig(alpha=0, target_kl=TARGET_KL[job]), 1.0, str(root / job))
        slot.reserve(job, 1 << 28)
    return slot


def _alone(model_path: str, root: Path, job: str, steps: int) -> tuple[dict, dict, float]:
    slot = _slot(model_path, root / f"alone-{job}", [job])
    slot.switch_in(job)
    for i in range(steps):
        slot.train(job, random_samples(SEEDS[job] + i))
    return trainer_state(slot)


def _interleave(slot: TrainerSlot, jobs: list[str], steps: int) -> dict[str, tuple[dict, dict, float]]:
    """Each job trains `steps` times, the jobs taking turns; each one's state after its last step."""
    kinds: list[str] = []
    out = {}
    for i in range(steps):
        for job in jobs:
            kinds.append(slot.switch_in(job).kind)
            slot.train(job, random_samples(SEEDS[job] + i))
            if i == steps - 1:
                out[job] = trainer_state(slot)
    slot.kinds = kinds  # type: ignore[attr-defined]
    return out


def test_lora_jobs_of_one_form_switch_adapters_only_and_train_as_if_alone(tiny_model_path, tmp_path):
    steps = 3
    slot = _slot(tiny_model_path, tmp_path / "shared", ["a", "b"])
    slot.switch_in("a")
    frozen = {n: p.data_ptr() for n, p in slot.trainer.model.named_parameters() if not p.requires_grad}
    got = _interleave(slot, ["a", "b"], steps)
    assert slot.kinds[:2] == ["none", "fresh"]  # a was switched in above
    # The second job of the form was built once; from then on every switch is warm, in place.
    assert set(slot.kinds[2:]) == {"warm"}
    tr = slot.trainer
    assert {n: p.data_ptr() for n, p in tr.model.named_parameters() if not p.requires_grad}.keys() == frozen.keys()
    for job in ("a", "b"):
        assert_same_state(got[job], _alone(tiny_model_path, tmp_path, job, steps))
    assert got["a"][2] < got["b"][2] == 1.0  # each job's step-size multiplier is its own
    # Resident: the trained tensors and their moments, a fraction of what a full job holds.
    host = slot.store.get("a")
    trained = sum(p.numel() for p in tr.trainable())
    all_params = sum(p.numel() for p in tr.model.parameters())
    assert host.trained_only and host.nbytes <= 3 * 4 * trained + 1024
    assert trained < all_params / 2
    state_bytes, weights_bytes = slot.state_bytes("b")
    assert state_bytes < 3 * weights_bytes  # a full job's: its weights and two moments, at least


def test_lora_trainers_of_other_forms_park_in_host_memory_and_come_back_warm(tiny_model_path, tmp_path):
    """A LoRA form's trainer (its frozen base) waits in host memory while other forms train and
    comes back as it was: no storage read. A full job after a LoRA one gets a rebuilt trainer
    (the placement keeps the two kinds apart). Each job trains as if alone."""
    steps = 3
    jobs = ["a", "c", "full"]
    slot = _slot(tiny_model_path, tmp_path / "shared", jobs)
    bases = {}
    kinds = []
    got = {}
    for i in range(steps):
        for job in jobs:
            kinds.append(slot.switch_in(job).kind)
            if job != "full":
                frozen = [p for p in slot.trainer.model.parameters() if not p.requires_grad]
                bases.setdefault(job, [p.data_ptr() for p in frozen])
                assert [p.data_ptr() for p in frozen] == bases[job]  # the same tensors, never re-read
            slot.train(job, random_samples(SEEDS[job] + i))
            got[job] = trainer_state(slot)
    assert kinds[:3] == ["fresh"] * 3
    assert kinds[3:] == ["warm", "warm", "rebuilt"] * (steps - 1)
    assert sorted(slot.parked) == sorted({_form(slot, "a"), _form(slot, "c")})  # the full job holds the device
    for job in jobs:
        assert_same_state(got[job], _alone(tiny_model_path, tmp_path, job, steps))
    slot.release("c")  # no job of its form left: its parked trainer goes too
    assert list(slot.parked) == [_form(slot, "a")]


def _form(slot: TrainerSlot, job: str) -> str:
    return trainer_form(slot.jobs[job])


def test_an_inactive_lora_job_checkpoints_from_host_and_resumes_cold_as_if_never_stopped(tiny_model_path, tmp_path):
    slot = _slot(tiny_model_path, tmp_path / "shared", ["a", "full"])
    slot.switch_in("a")
    slot.train("a", random_samples(0))
    want_weights = slot.trainer.engine_state_dict()
    slot.switch_in("full")  # a's state goes to host memory; the device now holds another form
    slot.train("full", random_samples(300))
    path = Path(slot.checkpoint("a", 1, {}, keep=2))
    from safetensors.torch import load_file

    saved = load_file(str(path / "weights.safetensors"))
    assert saved.keys() == want_weights.keys()
    for k, v in want_weights.items():
        assert torch.equal(saved[k], v), k
    # A slot that never held a: its first switch-in reads that checkpoint (cold) and goes on exactly.
    other = _slot(tiny_model_path, tmp_path / "shared", ["a"])
    assert str(latest_checkpoint(str(tmp_path / "shared" / "a"))) == str(path)
    assert other.switch_in("a").kind == "cold"
    other.train("a", random_samples(1))
    assert_same_state(trainer_state(other), _alone(tiny_model_path, tmp_path, "a", 2))


def test_merge_adapters_is_the_trainers_merged_weights(tiny_model_path, tmp_path):
    slot = _slot(tiny_model_path, tmp_path, ["a"])
    slot.switch_in("a")
    slot.train("a", random_samples(0))
    tr = slot.trainer
    merged = merge_adapters(base_weights(tiny_model_path), adapter_state(tr.model), LORA.lora_alpha / LORA.lora_rank)
    for k, v in tr.engine_state_dict().items():
        assert torch.equal(merged[k], v), k


def test_admission_takes_lora_jobs_and_estimates_their_trained_state(tiny_model_path, tmp_path):
    from roll_agentic.mux.mux_config import MuxConfig

    cfg = Config()
    cfg.algo.alpha = 0
    cfg.trainer.lora_rank, cfg.trainer.lora_full_modules = 4, ["embed_tokens"]
    m = MuxConfig()
    assert admission.refusal(cfg, tiny_model_path, tiny_model_path, m) == ""
    slot = _slot(tiny_model_path, tmp_path, ["a"])
    slot.switch_in("a")
    slot.train("a", random_samples(0))
    trained = sum(p.numel() for p in slot.trainer.trainable())
    frozen = sum(p.numel() for p in slot.trainer.model.parameters() if not p.requires_grad)
    # Its trained tensors and moments, and its form's parked trainer: the base and the same again,
    # and the initial values of the modules trained whole (the KL reference's).
    whole = sum(v.numel() for v in slot.trainer.model._lora_whole_initial.values())
    estimate = admission.estimated_state_bytes(tiny_model_path, cfg)
    assert estimate == (2 * 3 * trained + frozen + whole) * 4
    assert abs(slot.state_bytes("a")[0] - estimate) < 0.005 * estimate  # as measured (step counters more)
    assert admission.estimated_state_bytes(tiny_model_path, Config()) > estimate  # a full job's


def test_merging_onto_another_base_is_refused_naming_the_tensor():
    trained = {"m.q_proj.lora_A": torch.zeros(2, 8), "m.q_proj.lora_B": torch.zeros(4, 2)}
    assert merge_adapters({"m.q_proj.weight": torch.ones(4, 8)}, trained, 1.0)["m.q_proj.weight"].sum() == 32
    with pytest.raises(ValueError, match="no m.q_proj.weight of the adapters' shape"):
        merge_adapters({"m.q_proj.weight": torch.ones(4, 6)}, trained, 1.0)
    with pytest.raises(ValueError, match="its files changed or are gone"):
        merge_adapters({}, trained, 1.0)
