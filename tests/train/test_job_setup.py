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
