"""Where `roll-agentic eval` writes, and what it says of a run that trained other tasks (no engines)."""

import json

from roll_agentic.hydra_config import load_config
from roll_agentic.train.policy_eval import _eval_dir, _say_if_other_tasks
from roll_agentic.train.resume_record import config_json

CLIFF = "tasks=[{name:cliff,env_id:CliffWalking-v1,max_turns:20,format_penalty:2}]"


def test_a_run_name_that_is_a_training_runs_folder_gets_an_eval_folder_of_its_own(tmp_path, capsys):
    """A run yaml's run_name, passed again to evaluate that run, wrote eval.json and the
    exported policy into the run, whose own `model export ... policy` line then failed."""
    (tmp_path / "mix" / "checkpoints").mkdir(parents=True)
    cfg = load_config([f"output_dir={tmp_path}", "run_name=mix"])
    got = _eval_dir(cfg)
    assert got.parent == tmp_path and got.name.startswith("eval-")
    assert "is a training run's folder" in capsys.readouterr().out
    assert _eval_dir(load_config([f"output_dir={tmp_path}", "run_name=fresh"])) == tmp_path / "fresh"


def test_evaluating_a_run_on_other_tasks_than_it_trained_warns(tmp_path, capsys):
    from dataclasses import asdict

    run = tmp_path / "run"
    (run / "checkpoints" / "step_000003").mkdir(parents=True)
    (run / "config.json").write_text(config_json(asdict(load_config([CLIFF]))))
    _say_if_other_tasks(load_config([f"model.path={run}"]))
    out = capsys.readouterr().out
    assert out.startswith(f"warning: {run} trained tasks cliff; this evaluation plays frozenlake, guess")
    _say_if_other_tasks(load_config([f"model.path={run / 'checkpoints' / 'step_000003'}"]))  # one checkpoint
    assert "trained tasks cliff" in capsys.readouterr().out
    _say_if_other_tasks(load_config([f"model.path={run}", CLIFF]))
    assert capsys.readouterr().out == ""
    assert json.loads((run / "config.json").read_text())["tasks"][0]["name"] == "cliff"
