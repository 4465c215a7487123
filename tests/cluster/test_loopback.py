"""A local Ray listens on loopback only, even for a script that imported ray before roll_agentic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import ray  # first: Ray reads its cluster switch at import, before roll_agentic can set it
import psutil
from roll_agentic.cluster import init_ray
from roll_agentic.config import RayConfig

init_ray(RayConfig(num_cpus=1))
ray.get(ray.remote(lambda: 1).remote())  # a worker process is up too
hosts = set()
for child in psutil.Process().children(recursive=True):
    try:
        conns = child.net_connections(kind="inet")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        continue
    hosts |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
ray.shutdown()
print(sorted(hosts))
"""


def test_a_local_ray_listens_on_loopback_only_whatever_was_imported_first():
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # as a fresh shell has it
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=root,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    hosts = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own script's printed list
    assert hosts and all(h in ("127.0.0.1", "::ffff:127.0.0.1") for h in hosts), hosts
