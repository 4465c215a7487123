"""bench lora: a LoRA trainer and a full fine-tune of one model, on the same batches, side by side."""

import json

import pytest
import torch

from roll_agentic.bench.lora import LoraBenchConfig, run_bench
from roll_agentic.cli import main


def test_lora_steps_a_fraction_of_the_parameters_and_merges_exactly():
    out = run_bench(LoraBenchConfig(hidden=64, layers=2, vocab=256, rank=4, steps=2))
    assert 0 < out["lora_trained_params"] < out["full_trained_params"]
    # AdamW keeps two fp32 moments per stepped parameter, so its state scales with them.
    assert out["lora_optimizer_mb"] > 0
    ratio = out["full_trained_params"] / out["lora_trained_params"]
    assert out["optimizer_state_full_over_lora"] == pytest.approx(ratio, rel=0.02)
    assert out["full_step_s"] > 0 and out["lora_step_s"] > 0 and out["lora_publish_s"] > 0
    assert out["lora_merge_max_abs_diff"] < 1e-4  # the engines' merged weights compute the trainer's logits


def test_the_cli_prints_the_json_line_last(capsys):
    assert main(["bench", "lora", "--hidden", "64", "--layers", "1", "--vocab", "128", "--rank", "2",
                 "--steps", "2", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["lora_rank"] == 2 and "optimizer_state_full_over_lora" in line and "cpus_usable" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_bad_settings_say_which():
    with pytest.raises(SystemExit, match="torch sees no CUDA device"):
        run_bench(LoraBenchConfig(device="cuda"))
    with pytest.raises(SystemExit, match="--steps >= 2"):
        run_bench(LoraBenchConfig(steps=1))
