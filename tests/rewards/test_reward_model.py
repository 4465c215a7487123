"""rewards/reward_model.py: a deterministic torch forward pass, loaded once per process."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from rewards import reward_model  # noqa: E402


@pytest.fixture
def weights(tmp_path, monkeypatch):
    """A fresh process's state: no model yet, no weights named."""
    monkeypatch.setattr(reward_model, "_MODEL", None)
    monkeypatch.delenv("REWARD_MODEL_WEIGHTS", raising=False)
    return tmp_path / "rm.pt"


def test_scores_text_in_unit_interval_and_caches(weights):
    rng_before = torch.random.get_rng_state()
    a = reward_model.reward({"text": "the agent reached the goal"})
    b = reward_model.reward({"text": "the agent fell into a hole hole hole"})
    loads = reward_model._LOADS
    assert reward_model.reward({"text": "the agent reached the goal"}) == a
    assert reward_model._LOADS == loads  # no second load in the same process
    assert 0 < a < 1 and 0 < b < 1 and a != b
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the caller's RNG is untouched
    x = reward_model.featurize("a b a")
    assert x.shape == (1, reward_model.FEATURES) and float(x.sum()) == pytest.approx(math.log(3) + math.log(2), rel=1e-5)


def _in_a_fresh_process(env: dict) -> dict:
    script = (
        "import json, sys; from rewards import reward_model as m; "
        "print(json.dumps(m.handler({'text': 'hello world', 'extra': 1}, None)))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**env, "PATH": "/usr/bin:/bin"}, cwd=str(_root()))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_same_score_in_a_fresh_process_with_no_file_shared(weights):
    here = reward_model.reward({"text": "hello world", "extra": 1})
    res = _in_a_fresh_process({})
    assert res["reward"] == pytest.approx(here, abs=1e-6) and res["model_loads"] == 1


def test_named_weights_are_the_ones_scored_with(weights):
    model = reward_model.load_model()
    with torch.no_grad():
        model[2].bias.add_(3.0)  # "trained": every score moves up
    torch.save(model.state_dict(), weights)
    trained = reward_model.reward({"text": "hello world", "extra": 1})
    res = _in_a_fresh_process({"REWARD_MODEL_WEIGHTS": str(weights)})
    assert res["reward"] == pytest.approx(trained, abs=1e-6)
    assert res["reward"] != pytest.approx(_in_a_fresh_process({})["reward"], abs=1e-3)


def test_weights_of_another_shape_are_refused_naming_both(weights, monkeypatch):
    """A stale file of an older shape failed inside load_state_dict with a size-mismatch traceback."""
    torch.save({"0.weight": torch.zeros(4, 4)}, weights)
    monkeypatch.setenv("REWARD_MODEL_WEIGHTS", str(weights))
    with pytest.raises(ValueError, match=r"holds \{'0.weight': \(4, 4\)\}, not this model's state dict"):
        reward_model.reward({"text": "x"})


def test_missing_named_weights_is_an_error(weights, monkeypatch, tmp_path):
    monkeypatch.setenv("REWARD_MODEL_WEIGHTS", str(tmp_path / "absent.pt"))
    with pytest.raises(FileNotFoundError, match="REWARD_MODEL_WEIGHTS"):
        reward_model.reward({"text": "x"})


def _root():
    from pathlib import Path

    return Path(reward_model.__file__).resolve().parents[1]
