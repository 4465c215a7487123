"""Placement and routing on a local multi-node Ray cluster (loopback only).

Three nodes stand for three hardware classes through custom resources: a
CPU-only head ({"cpu_node"}), an H800-class node ({"gpu_h800"}) and an
H20-class node ({"gpu_h20"}). A training job joins the cluster through
`ray.address`; engines, the rollout worker and the trainer worker must land
where their resources say, each task's requests must be served by its pool,
and when the H800 pool's engine is killed mid-run the job goes on, its task
falling back to the default pool with the fallback counted.
"""

from __future__ import annotations

import os

import pytest

from roll_agentic.config import (
    AlgoConfig,
    Config,
    EngineConfig,
    EnvWorkersConfig,
    ModelConfig,
    PoolConfig,
    RayConfig,
    RolloutConfig,
    TaskConfig,
    TelemetryConfig,
    TrainerConfig,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every node on 127.0.0.1 only
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"cpu_node": 4},
                                                      "include_dashboard": False})
    try:
        nodes = {"cpu_node": c.head_node.node_id,
                 "gpu_h800": c.add_node(num_cpus=1, resources={"gpu_h800": 2}).node_id,
                 "gpu_h20": c.add_node(num_cpus=1, resources={"gpu_h20": 2}).node_id}
        c.wait_for_nodes()
        yield c, nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def _node_of(actor) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id()))


def _cfg(tmp_path, model_path: str, address: str) -> Config:
    tasks = [
        TaskConfig(name="frozenlake", env_id="envs.frozenlake:FrozenLakeText", env_kwargs={"size": 3},
                   max_turns=3, reward="frozenlake", group_size=2, max_new_tokens=4, pool="h800"),
        TaskConfig(name="guess", env_id="envs.guess_number:GuessNumber", env_kwargs={"low": 1, "high": 8},
                   max_turns=3, reward="guess_number", group_size=2, max_new_tokens=4),  # default pool
    ]
    return Config(
        run_name="multinode", output_dir=str(tmp_path), tasks=tasks,
        model=ModelConfig(path=model_path), engine=EngineConfig(backend="hf"),
        pools=[PoolConfig("default", "H20", 1, {"gpu_h20": 1}, price_per_hour=1.0),
               PoolConfig("h800", "H800", 1, {"gpu_h800": 1}, price_per_hour=2.0)],
        envs=EnvWorkersConfig(resources={"cpu_node": 1}),
        trainer=TrainerConfig(total_steps=4, resources={"gpu_h800": 1}, micro_batch_size=8),
        rollout=RolloutConfig(num_workers=1, groups_in_flight=2),
        algo=AlgoConfig(groups_per_step=2),
        ray=RayConfig(address=address),
        telemetry=TelemetryConfig(progress=False, tensorboard=False, plots=False),
    )


def test_actors_land_by_resources_tasks_use_their_pools_and_a_lost_pool_falls_back(cluster, tmp_path,
                                                                                  tiny_model_path):
    import ray

    from roll_agentic.train.job import TrainingJob

    c, nodes = cluster
    job = TrainingJob(_cfg(tmp_path, tiny_model_path, c.address))
    try:
        job.start()
        assert len([n for n in ray.nodes() if n["Alive"]]) == 3  # joined the existing cluster
        default_engine, h800_engine = job.engines  # effective_pools order: default, then h800
        assert _node_of(default_engine) == nodes["gpu_h20"]
        assert _node_of(h800_engine) == nodes["gpu_h800"]
        assert _node_of(job.workers[0]) == nodes["cpu_node"]  # env actors on the CPU node
        assert [_node_of(w) for w in job.trainer.workers] == [nodes["gpu_h800"]]

        m1 = job.step_once()
        served = {"default": ray.get(default_engine.stats.remote())["per_task"],
                  "h800": ray.get(h800_engine.stats.remote())["per_task"]}
        assert set(served["h800"]) == {"frozenlake"}  # each task on its own pool, nothing else there
        assert set(served["default"]) == {"guess"}
        assert m1["router/fallbacks"] == 0
        assert m1["pool/h800/served/frozenlake"] > 0 and m1["pool/default/served/guess"] > 0
        assert m1["pool/h800/routed/frozenlake"] > 0 and "pool/default/routed/frozenlake" not in m1
        assert m1["pool/h800/cost_usd"] > 0 and m1["pool/h800/live_engines"] == 1

        ray.kill(h800_engine)  # the H800 pool is lost mid-run
        m2 = job.step_once()
        m3 = job.step_once()  # the run goes on
        assert m3["step"] == 3
        assert m3["pool/h800/live_engines"] == 0
        assert m3["router/fallbacks"] > 0 and m3["pool/h800/fallbacks"] == m3["router/fallbacks"]
        assert m3["router/fallbacks"] >= m2["router/fallbacks"]
        assert ray.get(default_engine.stats.remote())["per_task"]["frozenlake"]["requests"] > 0
        assert m3["pool/default/routed/frozenlake"] > 0
    finally:
        job.close()
