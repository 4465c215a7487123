"""A run that asks for hardware the machine lacks is refused up front, naming who asks for what."""

import subprocess
import sys

import pytest
import torch

from roll_agentic.hydra_config import load_config
from roll_agentic.train.resource_check import (
    cluster_shortfall_warning,
    demand,
    in_process_device_error,
    shortfall_error,
)

LAPTOP = {"CPU": 32.0, "memory": 1e10}  # a local Ray without GPUs or node types


def test_the_default_run_asks_for_nothing_beyond_cpu_slots():
    cfg = load_config([])
    assert set(demand(cfg)) == {"CPU"}
    assert shortfall_error(cfg, LAPTOP) is None
    assert in_process_device_error(cfg, cuda_available=False) is None


def test_gpu_trainer_workers_and_pinned_pools_are_named_with_their_counts():
    cfg = load_config(["trainer.device=cuda", "trainer.num_workers=2", "trainer.strategy=fsdp",
                       "pools=[{name:default,num_engines:2,resources:{gpu_h20:1,GPU:1}}]"])
    msg = shortfall_error(cfg, LAPTOP)
    assert "GPU: 4 asked (pools[default] engines: 2 x 1; trainer workers: 2 x 1), 0 on this machine" in msg
    assert "gpu_h20: 2 asked (pools[default] engines: 2 x 1), 0 on this machine" in msg
    assert "trainer.device=cpu" in msg
    # The same run fits a node that has them.
    assert shortfall_error(cfg, {**LAPTOP, "GPU": 4.0, "gpu_h20": 2.0}) is None


def test_fewer_cpu_slots_than_the_engines_take_is_refused_naming_ray_num_cpus():
    """`ray.num_cpus=1` with two engines: the second engine waited for a slot for ever."""
    cfg = load_config(["ray.num_cpus=1", "pools=[{name:default,num_engines:2}]", "envs.num_cpus=0.5",
                       "rollout.num_workers=2"])
    msg = shortfall_error(cfg, {"CPU": 1.0})
    assert "CPU: 3 asked (pools[default] engines: 2 x 1; env workers (envs.resources): 2 x 0.5), 1 on this machine" in msg
    assert "raise ray.num_cpus" in msg
    assert shortfall_error(cfg, {"CPU": 3.0}) is None


def test_on_a_joined_cluster_a_shortfall_is_a_warning_that_flags_a_resource_no_node_has():
    cfg = load_config(["pools=[{name:default,num_engines:1,resources:{gpu_h20:1}},"
                       "{name:prefill,num_engines:4,resources:{gpu_h2O:1}}]"])
    cluster = {**LAPTOP, "gpu_h20": 4.0}
    msg = cluster_shortfall_warning(cfg, cluster)
    assert msg.startswith("warning: the run asks for more than the cluster's nodes have now")
    assert "gpu_h2O: 4 asked (pools[prefill] engines: 4 x 1), 0 in the cluster (no node has it: a typo?)" in msg
    assert "gpu_h20" not in msg.replace("gpu_h2O", "")  # the pool that fits is not named
    assert cluster_shortfall_warning(cfg, {**cluster, "gpu_h2O": 4.0}) is None


def test_one_cuda_trainer_runs_in_the_driver_so_the_driver_needs_the_gpu():
    cfg = load_config(["trainer.device=cuda"])
    assert "GPU" not in demand(cfg)  # no Ray actor asks: the trainer is in this process
    assert "torch sees no CUDA GPU" in in_process_device_error(cfg, cuda_available=False)
    assert in_process_device_error(cfg, cuda_available=True) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
def test_train_on_a_machine_without_gpu_ends_in_one_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "roll_agentic.cli", "train", "trainer.device=cuda",
                           "trainer.total_steps=1", f"output_dir={tmp_path}"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "error: trainer.device=cuda, but torch sees no CUDA GPU" in proc.stderr
    # the run dir named at the start is gone, and the output says so
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]
    if "run dir: " in proc.stdout:
        assert "removed: the run did not start" in proc.stdout
