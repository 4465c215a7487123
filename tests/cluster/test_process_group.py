"""A signal to the run's whole process group (what `timeout` sends at its limit) reaches the
run, not the local Ray it started: the run can still save from its actors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roll_agentic.cluster import ray_processes_in_own_session

SCRIPT = """
import os, signal, time
import ray
from roll_agentic.cluster import init_ray
from roll_agentic.config import RayConfig

init_ray(RayConfig(num_cpus=1))

@ray.remote
class Holder:
    def state(self):
        return "saved"

holder = Holder.remote()
ray.get(holder.state.remote())
taken = []
signal.signal(signal.SIGTERM, lambda *_: taken.append(True))  # the run's own handler (train/termination.py)
os.killpg(os.getpgid(0), signal.SIGTERM)  # as `timeout` does: the whole group
time.sleep(1.0)
# A new actor needs Ray's control store (GCS): in the group, it had ended, and this hung
# until the driver gave up on it 60 s later.
late = Holder.remote()
print("after", taken, ray.get(holder.state.remote(), timeout=30), ray.get(late.state.remote(), timeout=30))
ray.shutdown()
"""


@pytest.mark.slow
def test_a_signal_to_the_runs_process_group_leaves_its_local_ray_running():
    root = str(Path(__file__).resolve().parents[2])
    # Its own group, as a command under `timeout` has: the signal must not reach pytest.
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=root,
                         start_new_session=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "after [True] saved saved", out.stdout


def test_only_processes_started_inside_go_in_a_session_of_their_own():
    from ray._private import services

    before = services.ConsolePopen
    with ray_processes_in_own_session():
        child = services.ConsolePopen([sys.executable, "-c", "import os; print(os.getsid(0))"],
                                      stdout=subprocess.PIPE, text=True)
        sid = int(child.communicate(timeout=60)[0])
    assert sid == child.pid != os.getsid(0)  # a session leader: no group signal of ours reaches it
    assert services.ConsolePopen is before
    child = before([sys.executable, "-c", "import os; print(os.getsid(0))"], stdout=subprocess.PIPE, text=True)
    assert int(child.communicate(timeout=60)[0]) == os.getsid(0)
