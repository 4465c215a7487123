"""How a pool's own hardware is modelled on one machine: pinned cores, denormals flushed in training."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.mux.mux_config import load_mux_config

CHILD = """
import os, threading, time
from roll_agentic.mux.actor_calls import _pin_here
stop = threading.Event()
t = threading.Thread(target=stop.wait)
t.start()  # a thread that exists before the pin
print(_pin_here(None, (0, 10_000)))  # a core the machine lacks is left out
late = threading.Thread(target=stop.wait)
late.start()  # and one started after it inherits the mask
masks = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
stop.set()
print(sorted({tuple(m) for m in masks.values()}), len(masks))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_pinning_a_process_pins_all_its_threads_now_and_later():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[0]"
    assert out[1].startswith("[(0,)]")  # one mask, core 0, over every thread
    assert int(out[1].split()[-1]) >= 3


def test_pool_cores_are_validated(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("rollout_cpus: [0]\ntrain_cpus: [1]\nflush_denormal: true\n")
    m = load_mux_config(path)
    assert (m.rollout_cpus, m.train_cpus, m.flush_denormal) == ([0], [1], True)
    path.write_text("rollout_cpus: 0\n")
    with pytest.raises(ConfigError, match="rollout_cpus"):
        load_mux_config(path)


def test_a_flushing_trainer_slot_trains_with_denormals_flushed(tiny_model_path, tmp_path):
    import torch

    from roll_agentic.config import AlgoConfig, TrainerConfig
    from roll_agentic.mux.trainer_slot import TrainerSlot
    from roll_agentic.train.trainer import Sample

    slot = TrainerSlot("train0", budget_bytes=1 << 30, flush_denormal=True)
    slot.register("a", tiny_model_path, TrainerConfig(), AlgoConfig(alpha=0), 1.0, str(tmp_path / "a"))
    slot.switch_in("a")
    try:
        slot.train("a", [Sample([5, 6, 7, 8], [0, 0, 1, 1], [-1.0] * 4, 1.0)])
        assert float(torch.tensor([1e-39]) * 1.0) == 0.0  # a denormal result, flushed in this thread
    finally:
        torch.set_flush_denormal(False)
    assert float(torch.tensor([1e-39]) * 1.0) != 0.0
