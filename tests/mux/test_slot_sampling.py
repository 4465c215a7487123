"""A trainer slot scores each job's tokens as that job's engines sampled them."""

from __future__ import annotations

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.mux.trainer_slot import TrainerSlot


def test_each_job_on_a_slot_is_scored_with_its_own_temperature_and_top_p(tiny_model_path, tmp_path):
    """The slot built its trainer without top_p: a job sampling with top_p < 1 was scored over
    the whole distribution, and its PPO ratio was biased on the very weights that sampled."""
    slot = TrainerSlot("train0", budget_bytes=1 << 30)
    slot.register("a", tiny_model_path, TrainerConfig(), AlgoConfig(alpha=0), 0.9, str(tmp_path / "a"), 0.8)
    slot.register("b", tiny_model_path, TrainerConfig(), AlgoConfig(alpha=0), 1.0, str(tmp_path / "b"))
    assert slot.switch_in("a").kind == "fresh"
    assert (slot.trainer.temperature, slot.trainer.top_p) == (0.9, 0.8)
    slot.park("a", 0, {"buffer": {}}, keep=1)
    slot.switch_in("b")
    assert (slot.trainer.temperature, slot.trainer.top_p) == (1.0, 1.0)
    slot.switch_in("a")  # warm: host memory back onto the same trainer
    assert (slot.trainer.temperature, slot.trainer.top_p) == (0.9, 0.8)
