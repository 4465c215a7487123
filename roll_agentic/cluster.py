"""Starting or joining Ray.

Single machine: a fresh local Ray bound to loopback only (Ray otherwise binds
all interfaces and advertises the machine's network address). Cluster:
`ray.address` joins an existing cluster, unchanged code.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import sys
from collections.abc import Iterator

import ray

from roll_agentic.config import RayConfig

LOCAL_LOGICAL_CPUS = 16
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
             "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARNING"}  # logical slots for actors on one machine; they are mostly idle or async


def loopback_environment() -> None:
    """Env vars that keep a local Ray on 127.0.0.1 and quiet; set before Ray starts."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_libraries()


def quiet_libraries() -> None:
    """Progress bars of weight loading, once per actor, drown the training display."""
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    # transformers reads HF_HUB_DISABLE_PROGRESS_BARS once, when first imported: a process
    # that imported it before this (the driver, through its config) drew "Loading weights".
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        hf_logging.disable_progress_bar()


def freeze_startup_heap(only_in_actor: bool = True) -> None:
    """Takes what a long-lived actor allocated while starting out of the garbage collector's scans.

    Libraries, a tokenizer and an engine leave millions of objects that live as
    long as the process. Python's full collections scan them all: in a rollout
    worker one took 0.27-0.37 s, and the worker's event loop, with every episode
    on it, stood still meanwhile (measured in `bench engine`: the slowest round of
    every run). Frozen objects are never scanned; what the run allocates is.
    Outside a Ray actor (an engine or worker built in a test process) it does
    nothing: that process's heap is not the actor's to freeze."""
    # Not initialised: no actor. (Asking the runtime context then started a whole
    # local Ray, 20 s, in a process that only built a worker or an engine.)
    if only_in_actor and (not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None):
        return
    gc.collect()
    gc.freeze()


def _reachable(address: str) -> None:
    """Raises RuntimeError, in one line, if nothing listens at a host:port `ray.address`.

    Ray itself retried a wrong address for minutes, printing a warning every few seconds."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            pass
    except OSError as err:
        raise RuntimeError(f"ray.address={address}: nothing answers there ({err}); start the cluster "
                           "first, or leave ray.address empty for a local Ray") from None


def init_ray(cfg: RayConfig) -> bool:
    """Initialises Ray unless it already is; returns True if this call started it."""
    if ray.is_initialized():
        return False
    quiet_libraries()
    runtime_env = {"env_vars": dict(QUIET_ENV, PYTHONWARNINGS="ignore")}
    if cfg.address:
        _reachable(cfg.address)
        ray.init(address=cfg.address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 log_to_driver=True)
        return True
    loopback_environment()
    # Ray read RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER when it was first imported: a script that
    # imported ray before roll_agentic would bind every interface. Say "local only" again.
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") != "0"
    with ray_processes_in_own_session():
        ray.init(address="local", num_cpus=cfg.num_cpus or LOCAL_LOGICAL_CPUS, include_dashboard=False,
                 _node_ip_address="127.0.0.1", runtime_env=runtime_env, logging_level=logging.WARNING,
                 configure_logging=True)
    return True


@contextlib.contextmanager
def ray_processes_in_own_session() -> Iterator[None]:
    """The processes a local Ray starts meanwhile (GCS, raylet, and the workers the raylet
    forks) go in a session and process group of their own.

    `timeout`, and whatever else stops a run by signalling its whole process group,
    used to reach them too: the control store (GCS) ended, and while the run took its
    SIGTERM (`train/termination.py`), anything that needed a new Ray task or actor
    hung for a minute, then failed (the actors it had still answered). Out of the
    group, only the run's own process gets the signal; the Ray
    processes still end with it (Ray kills them when their parent dies, and
    `ray.shutdown` does). Ctrl-C is unchanged: Ray's processes block SIGINT anyway.
    A Ray whose internals moved (no `ConsolePopen`) starts as before.
    """
    from ray._private import services

    popen = getattr(services, "ConsolePopen", None)
    if popen is None or os.name != "posix":
        yield
        return

    class InOwnSession(popen):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = InOwnSession
    try:
        yield
    finally:
        services.ConsolePopen = popen
