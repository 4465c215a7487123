"""Starting or joining Ray.

Single machine: a fresh local Ray bound to loopback only (Ray otherwise binds
all interfaces and advertises the machine's network address). Cluster:
`ray.address` joins an existing cluster, unchanged code.
"""

from __future__ import annotations

import logging
import os

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


def init_ray(cfg: RayConfig) -> bool:
    """Initialises Ray unless it already is; returns True if this call started it."""
    if ray.is_initialized():
        return False
    quiet_libraries()
    runtime_env = {"env_vars": dict(QUIET_ENV, PYTHONWARNINGS="ignore")}
    if cfg.address:
        ray.init(address=cfg.address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 log_to_driver=True)
        return True
    loopback_environment()
    ray.init(address="local", num_cpus=cfg.num_cpus or LOCAL_LOGICAL_CPUS, include_dashboard=False,
             _node_ip_address="127.0.0.1", runtime_env=runtime_env, logging_level=logging.WARNING,
             configure_logging=True)
    return True
