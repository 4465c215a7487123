"""A run joining a cluster whose rollout workers could not reach its reward emulator is refused."""

import pytest

from roll_agentic.hydra_config import load_config
from roll_agentic.train import job_setup
from roll_agentic.train.job_setup import emulator_reach_problem


def test_only_a_joined_cluster_with_the_runs_own_emulator_is_a_problem():
    cluster = ["ray.address=127.0.0.1:6399"]
    assert emulator_reach_problem(load_config([]), 1) == ""  # a local Ray: one machine
    assert emulator_reach_problem(load_config([*cluster, "reward=local"]), 3) == ""
    assert emulator_reach_problem(load_config([*cluster, "reward.endpoint_url=http://127.0.0.1:9001"]), 3) == ""
    says = emulator_reach_problem(load_config(cluster), 3)
    assert "127.0.0.1" in says and "reward.endpoint_url" in says and "reward=local" in says


@pytest.mark.parametrize("nodes, refused", [(1, False), (3, True)])
def test_start_ray_refuses_several_nodes_and_warns_on_one(monkeypatch, capsys, nodes, refused):
    import ray

    import roll_agentic.cluster

    monkeypatch.setattr(roll_agentic.cluster, "init_ray", lambda cfg: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}] * nodes + [{"Alive": False}])
    shut = []
    monkeypatch.setattr(ray, "shutdown", lambda: shut.append(1))
    cfg = load_config(["ray.address=127.0.0.1:6399"])
    if refused:
        with pytest.raises(RuntimeError, match=r"other nodes cannot reach \(3 node\(s\) now\)"):
            job_setup.start_ray(cfg)
        assert shut  # the connection it made is closed
    else:
        assert job_setup.start_ray(cfg) is True
        assert "warning: reward.mode=serverless starts the reward emulator" in capsys.readouterr().out


def test_a_context_longer_than_the_models_positions_is_refused_before_ray_starts(tmp_path):
    """vLLM refused it inside each engine's start, after Ray and the reward emulator were up."""
    from roll_agentic.train.job_setup import context_problem

    (tmp_path / "config.json").write_text('{"model_type": "qwen2", "max_position_embeddings": 2048}')
    said = context_problem(4096, tmp_path)
    assert said.startswith("engine.max_model_len=4096 is longer than the model's max_position_embeddings (2048")
    assert said.endswith("set engine.max_model_len <= 2048")
    assert context_problem(2048, tmp_path) == ""
    (tmp_path / "config.json").write_text('{"model_type": "qwen2"}')  # not said: nothing to check against
    assert context_problem(4096, tmp_path) == ""


def test_an_actor_that_failed_to_start_is_said_by_its_exception_alone():
    """Ray's report of the death is the actor's whole traceback, source and carets included."""
    from roll_agentic.train.job_setup import raised_in_actor

    report = Exception(
        "The actor died because of an error raised in its creation task, ray::EngineHost.__init__() (pid=1)\n"
        '  File "/x/host.py", line 40, in __init__\n'
        "    self.engine = make_engine(backend)\n"
        '  File "/x/vllm_engine.py", line 12, in make_engine\n'
        "    raise ValueError('max_model_len (4096) is greater than the derived max_model_len')\n"
        "    ^^^^^^^^^^^^^^^^\n"
        "ValueError: max_model_len (4096) is greater than\n"
        "the derived max_model_len")
    assert raised_in_actor(report) == ("ValueError: max_model_len (4096) is greater than the derived "
                                       "max_model_len")
    assert raised_in_actor(Exception("no traceback at all")) == "no traceback at all"
