"""Pool pinning: every thread of a pinned process runs on the pool's cores only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.mux.mux_config import load_mux_config

CHILD = """
import os, threading, time
from roll_agentic.mux.job_runner import _pin_here
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
    path.write_text("rollout_cpus: [0]\ntrain_cpus: [1]\n")
    m = load_mux_config(path)
    assert (m.rollout_cpus, m.train_cpus) == ([0], [1])
    path.write_text("rollout_cpus: 0\n")
    with pytest.raises(ConfigError, match="rollout_cpus"):
        load_mux_config(path)
