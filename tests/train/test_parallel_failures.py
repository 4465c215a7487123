"""Data-parallel workers: where they listen, and a worker that dies or hangs mid-step.

Real Ray actors and gloo process groups; a worker is killed (SIGKILL) or
frozen (SIGSTOP) by its process id, as a crash or a stuck rank would leave it.
"""

import ipaddress
import os
import signal
import threading
import time

import psutil
import pytest
import ray

from roll_agentic.cluster import init_ray
from roll_agentic.config import AlgoConfig, RayConfig, TrainerConfig
from roll_agentic.train.parallel import DataParallelTrainer
from tests.train.batches import random_batch


def _pids(dp: DataParallelTrainer) -> list[int]:
    return ray.get([w.__ray_call__.remote(lambda self: os.getpid()) for w in dp.workers])


def _listening(pid: int) -> set[str]:
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


def _step_in_thread(dp: DataParallelTrainer, limit_s: float) -> tuple[BaseException | None, float]:
    """(the error train_step raised, seconds it took); fails the test if it still runs after `limit_s`."""
    out: dict = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            dp.train_step(random_batch(1, 16))
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out["err"] = err
        out["s"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"train_step still waiting {limit_s} s after a worker stopped: the run hangs"
    return out.get("err"), out["s"]


@pytest.mark.slow
def test_workers_listen_on_loopback_only_and_a_killed_worker_fails_the_step(tiny_model_path):
    init_ray(RayConfig(num_cpus=4))
    dp = None
    try:
        dp = DataParallelTrainer(tiny_model_path, TrainerConfig(num_workers=2, micro_batch_size=2), AlgoConfig(),
                                 collective_timeout_s=30)
        dp.train_step(random_batch(0, 4))
        pids = _pids(dp)
        # The rendezvous store (which torch binds to every interface) and gloo's own
        # sockets, as well as Ray's: nothing reachable from outside the machine.
        for pid in pids:
            addrs = _listening(pid)
            assert addrs and all(ipaddress.ip_address(a.removeprefix("::ffff:")).is_loopback for a in addrs), addrs

        os.kill(pids[1], signal.SIGKILL)
        err, took = _step_in_thread(dp, 60)
        assert isinstance(err, RuntimeError) and "trainer worker 1 of 2 failed in train_step" in str(err)
        assert "trainer.resume=true" in str(err) and took < 20
        assert _gone(pids[0], within_s=15), "the surviving worker was left running"
    finally:
        if dp is not None:
            dp.close()
        ray.shutdown()


@pytest.mark.slow
def test_a_stuck_worker_ends_the_step_after_the_collective_timeout(tiny_model_path):
    init_ray(RayConfig(num_cpus=4))
    dp = None
    pids: list[int] = []
    try:
        dp = DataParallelTrainer(tiny_model_path, TrainerConfig(num_workers=2, micro_batch_size=2), AlgoConfig(),
                                 collective_timeout_s=5)
        dp.train_step(random_batch(0, 4))
        pids = _pids(dp)
        os.kill(pids[1], signal.SIGSTOP)  # alive, holding its sockets open, never answering
        # torch's default collective timeout was 30 minutes; every rank waited that long.
        err, took = _step_in_thread(dp, 90)
        assert isinstance(err, RuntimeError), err
        assert "trainer worker 0 of 2 failed in train_step" in str(err) and "Timed out" in str(err)
        assert 4 < took < 60
    finally:
        for pid in pids[1:]:  # the frozen one: Ray's kill waits for it to answer first
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        if dp is not None:
            dp.close()
        ray.shutdown()
