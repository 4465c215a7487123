"""What `roll-agentic mux run` reads: the pools it owns and the jobs it admits.

A mux file (conf/mux/*.yaml) names the inventory -- rollout nodes (each a set
of engine actors) and training nodes (each one trainer process) -- the host
memory each node lends to resident job state, the prices the placement
policy minimises, and the jobs. A job is a full training config (hydra
overrides over conf/config.yaml, or another config dir) plus its SLO: the
slowdown of an iteration it tolerates versus running alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from roll_agentic.config import ConfigError, _check
from roll_agentic.engine.factory import BACKENDS


@dataclass
class JobSpec:
    name: str
    slo: float = 1.5  # tolerated slowdown of an iteration versus running alone
    overrides: list[str] = field(default_factory=list)  # hydra key=value over the job's config
    config_dir: str = ""  # "" = the repo's conf/
    config_name: str = "config"


@dataclass
class MuxConfig:
    name: str = "mux"
    output_dir: str = "outputs/mux"
    model_path: str = ""  # the architecture the rollout pool serves; "" = the tiny model
    tiny_dir: str = ".cache/tiny-model"
    backend: str = "hf"  # rollout engines: hf | vllm | auto
    rollout_nodes: int = 1
    engines_per_node: int = 1
    train_nodes: int = 1
    max_batch: int = 64
    max_model_len: int = 1024
    # The shared vLLM engines' memory and cache settings (an HF pool reads none of them);
    # defaults as `engine.*`'s. A job's own engine.* value of these is honoured only if equal.
    kv_cache_gib: float = 1.0
    gpu_memory_utilization: float = 0.5
    enable_prefix_caching: bool = True
    # Host memory per node that resident job state may use (bytes). A job
    # whose state exceeds it is refused; one that does not fit now waits.
    residency_budget_bytes: int = 1 << 30
    train_threads: int = 1  # torch threads of each trainer process
    # Cores of this machine given to each pool (empty: not pinned). RollMux's
    # pools are separate hardware; pinning the rollout pool's processes (engines,
    # workers) and the trainer processes to disjoint cores models that on one
    # machine, for the solo baseline and the multiplexed pass alike.
    rollout_cpus: list[int] = field(default_factory=list)
    train_cpus: list[int] = field(default_factory=list)
    # Trainer arithmetic flushes denormal floats to zero. On a CPU, as a policy
    # sharpens, softmax tails fall into the denormal range and each training
    # step slows down (measured: 1.85x for the same batch at step 16 of a
    # guess job), so phase times drift far from the profile taken on arrival;
    # accelerators run denormals at full speed. Same setting solo and multiplexed.
    flush_denormal: bool = False
    warm_switch_s: float = 0.05  # the policy's switch cost (measured figures go to the summary)
    rollout_price_per_hour: float = 1.0
    train_price_per_hour: float = 2.85
    # Worst-case factor on the profiled phases: the engines cannot be told to
    # decode every reply to max_new_tokens, so the probe's real phases are
    # scaled by this margin (MECHANISMS.md s2 step 1 asks for worst case).
    profile_margin: float = 1.2
    profile_steps: int = 2  # probe iterations on arrival: a warm-up, then the measured one
    slo_headroom: float = 0.10
    phase_timeout_s: float = 900.0  # a phase that runs longer fails its job, never the pools
    # A job whose newest state died with a trainer process goes back to its last
    # checkpoint and takes the steps since again, at most this many times (then it
    # fails: a step that kills its trainer every time would loop forever). 0: fail at once.
    max_rollbacks: int = 2
    ray_num_cpus: int = 0
    jobs: list[JobSpec] = field(default_factory=list)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; ConfigError naming the file for a missing or malformed one."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None


def _job(raw: Any, where: str) -> JobSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a job mapping (name, slo, overrides, ...), got {raw!r}")
    unknown = set(raw) - {"name", "slo", "overrides", "config_dir", "config_name"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; valid: name, slo, overrides, "
                          "config_dir, config_name")
    if not raw.get("name") or not re.fullmatch(r"[\w.-]+", str(raw["name"])) or str(raw["name"]) in (".", ".."):
        raise ConfigError(f"{where}.name: expected a job name of letters, digits, . _ - "
                          f"(it names the job's run directory), got {raw.get('name')!r}")
    slo, overrides = raw.get("slo", 1.5), raw.get("overrides") or []
    if isinstance(slo, bool) or not isinstance(slo, int | float):
        raise ConfigError(f"{where}.slo: expected a slowdown factor >= 1.0 (a number), got {slo!r}")
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"{where}.overrides: expected a list of key=value strings, got {overrides!r}")
    spec = JobSpec(str(raw["name"]), float(slo), list(overrides),
                   str(raw.get("config_dir") or ""), str(raw.get("config_name") or "config"))
    # NaN passed the comparison (nan < 1.0 is False); inf would tolerate any slowdown.
    if not math.isfinite(spec.slo) or spec.slo < 1.0:
        raise ConfigError(f"{where}.slo: expected a finite slowdown factor >= 1.0, got {spec.slo}")
    return spec


def parse_jobs(raw: Any, where: str = "jobs") -> list[JobSpec]:
    """A single job mapping or a `jobs:` list (what `mux submit` accepts)."""
    if isinstance(raw, dict) and "jobs" in raw:
        raw = raw["jobs"]
    if isinstance(raw, dict):
        return [_job(raw, where)]
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a job mapping or a list of jobs")
    jobs = [_job(j, f"{where}[{i}]") for i, j in enumerate(raw)]
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: job names must be unique, got {names}")
    return jobs


def load_mux_config(path: str | Path, overrides: dict[str, Any] | None = None) -> MuxConfig:
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of mux settings (see conf/mux/two_tiny.yaml)")
    raw.update(overrides or {})
    fields = MuxConfig.__dataclass_fields__
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)}; valid: {', '.join(sorted(fields))}")
    defaults = MuxConfig()
    for key, value in raw.items():  # each setting has its default's type (an int may stand for a float)
        want = type(getattr(defaults, key))
        ok = isinstance(value, want) and not (isinstance(value, bool) and want is not bool)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if key != "jobs" and not ok:
            raise ConfigError(f"{path}: {key}: expected {want.__name__}, got {value!r}")
    jobs = parse_jobs(raw.pop("jobs", []) or [], where=f"{path}: jobs")
    cfg = MuxConfig(**raw, jobs=jobs)
    e = range_problems(cfg)
    if e:  # every problem at once, listed as `roll_agentic.config_check.validate` lists them
        raise ConfigError(f"{path}: {e[0]}" + (f" (and {len(e) - 1} more: {'; '.join(e[1:])})" if len(e) > 1 else ""))
    return cfg


def range_problems(cfg: MuxConfig) -> list[str]:
    """What is out of range in `cfg`, one `key: expected ..., got ...` each; [] if nothing.

    Before, a typo in `backend` ran the HF engine, and a negative timeout, a zero
    batch or a NaN price went on to fail (or mislead) far from the file that said it.
    """
    e: list[str] = []
    for key in ("warm_switch_s", "rollout_price_per_hour", "train_price_per_hour", "profile_margin",
                "slo_headroom", "phase_timeout_s"):
        # The range checks below compare, so NaN fails them, but inf passed every ">= 0".
        value = getattr(cfg, key)
        _check(e, math.isfinite(value), key, "a finite number", value)
    _check(e, cfg.backend in BACKENDS, "backend", f"one of {', '.join(BACKENDS)}", cfg.backend)
    for key in ("rollout_nodes", "engines_per_node", "train_nodes", "residency_budget_bytes", "train_threads",
                "max_batch"):
        _check(e, getattr(cfg, key) >= 1, key, "an integer >= 1", getattr(cfg, key))
    # The engines refuse a shorter context (`engine.max_model_len` has the same floor).
    _check(e, cfg.max_model_len >= 64, "max_model_len", "an integer >= 64", cfg.max_model_len)
    _check(e, math.isfinite(cfg.kv_cache_gib) and cfg.kv_cache_gib > 0, "kv_cache_gib", "a number > 0 (GiB)",
           cfg.kv_cache_gib)
    _check(e, 0 < cfg.gpu_memory_utilization <= 1, "gpu_memory_utilization", "a number in (0, 1]",
           cfg.gpu_memory_utilization)
    _check(e, cfg.warm_switch_s >= 0, "warm_switch_s", "a number of seconds >= 0", cfg.warm_switch_s)
    for key in ("rollout_price_per_hour", "train_price_per_hour"):
        _check(e, getattr(cfg, key) >= 0, key, "a number >= 0", getattr(cfg, key))
    _check(e, cfg.profile_margin >= 1.0, "profile_margin", "a number >= 1.0 (worst case)", cfg.profile_margin)
    _check(e, cfg.profile_steps >= 1, "profile_steps", "an integer >= 1", cfg.profile_steps)
    # A negative headroom would loosen every job's SLO instead of keeping a margin of it.
    _check(e, cfg.slo_headroom >= 0, "slo_headroom", "a number >= 0", cfg.slo_headroom)
    _check(e, cfg.phase_timeout_s > 0, "phase_timeout_s", "a number of seconds > 0", cfg.phase_timeout_s)
    _check(e, cfg.max_rollbacks >= 0, "max_rollbacks", "an integer >= 0 (0 = fail at once)", cfg.max_rollbacks)
    _check(e, cfg.ray_num_cpus >= 0, "ray_num_cpus", "an integer >= 0 (0 = 16 logical slots)", cfg.ray_num_cpus)
    for key in ("rollout_cpus", "train_cpus"):
        # Not checked against this machine's cores: the file is also read where the pools do not
        # run (`mux status --config` finds the address file through it), and the pinning leaves
        # out a core the machine lacks (`actor_calls._pin_here`).
        cpus = getattr(cfg, key)
        numbers = isinstance(cpus, list) and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                                 for c in cpus)
        _check(e, numbers and len(set(cpus)) == len(cpus), key,
               "a list of distinct core numbers >= 0 (empty: not pinned)", cpus)
    return e
