"""`roll-agentic eval`: a model's held-out episodes with no training, the same each time it is asked."""

from __future__ import annotations

import json

import pytest

from roll_agentic.cli import main
from roll_agentic.hydra_config import load_config
from roll_agentic.train.policy_eval import eval_table, evaluate_policy

pytestmark = pytest.mark.slow

ARGS = ["engine=hf", "reward=local", "eval.episodes=4", "rollout.num_workers=2", "telemetry.progress=false"]


def test_eval_plays_every_tasks_episodes_and_says_the_same_of_the_same_model(tmp_path, tiny_model_path, capsys):
    args = [*ARGS, f"model.path={tiny_model_path}", f"output_dir={tmp_path}"]
    assert main(["eval", *args, "run_name=first"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    result = json.loads(printed[-1])  # the JSON object on the last line
    assert result["model"] == tiny_model_path and result["episodes_per_task"] == 4
    for task in ("frozenlake", "guess"):
        m = result["tasks"][task]
        assert m["episodes"] == 4 and m["failed"] == 0, m
        assert 0.0 <= m["success"] <= 1.0 and m["turns"] >= 1
    assert any(line.strip().startswith("frozenlake") for line in printed)  # the table
    assert json.loads((tmp_path / "first" / "eval.json").read_text()) == result

    # Greedy, on the same seeds: the same figures on a second asking (here through the library).
    again = evaluate_policy(load_config([*args, "run_name=second"]))
    assert again["tasks"] == result["tasks"]
    assert eval_table(again)[2].split()[0] == "frozenlake"


def test_a_model_path_that_is_no_model_is_one_line_and_starts_nothing(tmp_path, capsys):
    assert main(["eval", *ARGS, f"model.path={tmp_path / 'none'}", f"output_dir={tmp_path}"]) == 1
    err = capsys.readouterr().err
    assert "is not a Hugging Face checkpoint" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no eval directory
    # A run directory has a config.json too (the run's): transformers failed on it with a
    # traceback. One with no checkpoint yet has nothing to evaluate.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text('{"model": {"path": ""}}')
    assert main(["eval", *ARGS, f"model.path={run}", f"output_dir={tmp_path / 'out'}"]) == 1
    err = capsys.readouterr().err
    assert f"error: {run} has no complete checkpoint yet" in err and len(err.strip().splitlines()) == 1


def test_a_run_named_as_the_model_is_evaluated_on_its_newest_checkpoint(tmp_path, tiny_model_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    from roll_agentic.train.checkpoint import save_checkpoint

    run = tmp_path / "run"
    weights = {k: v + 0.01 for k, v in AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict().items()
               if k != "lm_head.weight"}
    save_checkpoint(run / "checkpoints", 7, weights, {}, {"buffer": {}, "model_path": tiny_model_path})
    assert main(["eval", *ARGS, f"model.path={run}", f"output_dir={tmp_path}", "run_name=e"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["checkpoint"] == str(run / "checkpoints" / "step_000007")
    assert result["model"] == str(tmp_path / "e" / "policy")  # exported there, and evaluated
    assert all(m["episodes"] == 4 for m in result["tasks"].values())
    served = AutoModelForCausalLM.from_pretrained(result["model"]).state_dict()
    assert torch.equal(served["model.norm.weight"], weights["model.norm.weight"])
    assert main(["eval", "eval.episodes=0"]) == 2
    assert "eval.episodes: expected an integer >= 1" in capsys.readouterr().err
