"""A multiplexed job's `engine.*` settings: honoured per job where they can be, else refused.

The multiplexer's rollout engines are shared by every job and built once, from the
mux yaml (`Multiplexer.start`: mux.backend, mux.max_batch, mux.max_model_len,
mux.engines_per_node, and vLLM's mux.kv_cache_gib, mux.gpu_memory_utilization,
mux.enable_prefix_caching; every other engine setting at `EngineConfig`'s default). A job's
own engine section was read by nothing but its rollout workers and its trainer, so a
job that asked for engine.backend=vllm, engine.max_batch=8 or engine.kv_cache_gib=4
ran on the pool's engines without a word, and one with engine.max_model_len above the
pool's had its workers grow conversations the engines could not take.

Key by key (`HOW`):
- temperature, top_p: per request. The job's workers put them in each request's
  sampling parameters and its trainer scores with them (`JobRunner.setup`): honoured.
- max_model_len: the job's workers end an episode whose next turn would not fit in it;
  the engines take up to mux.max_model_len. Up to that it is honoured (the job's
  episodes end at its own limit); above it, refused. A job that does not set it gets
  the pool's: its workers then stop where the engines do.
- sync_in_flight: how a vLLM engine treats requests in flight at a weight load. The
  multiplexer drains the engines before every load (`job_runner.py`), so none ever is:
  either value behaves the same, and neither is refused.
- backend, max_batch, num_engines: the pool's (mux.backend, mux.max_batch,
  mux.engines_per_node); a job that sets another value is refused, naming the mux key.
  A job's backend `auto` means "whatever the engines are": it takes the pool's.
- kv_cache_gib, gpu_memory_utilization, enable_prefix_caching: the pool's too (the mux
  keys of the same names; before, no mux key set them and any other value was refused).
Backend-specific keys are refused only where the pool runs that backend, as a solo
run on the other backend would ignore them too (max_batch is the HF engine's alone).

The check runs where the jobs are loaded (`mux run`, `mux submit`), before anything
starts; the job's config then records the engines it really runs on.

A job's `pools` and `tasks[].pool` (hardware-affine routing over pools of its own) are
refused the same way (`pool_problem`): its turns run on the shared engines, one routing
pool spanning them, so the multiplexer replaced its pools with that one without a word.
Left at their defaults (no pools, every task's pool `default`) they are what the job gets.
"""

from __future__ import annotations

import copy
import dataclasses

from roll_agentic.config import Config, ConfigError, EngineConfig
from roll_agentic.config_check import validate
from roll_agentic.engine.factory import vllm_available
from roll_agentic.mux.mux_config import JobSpec, MuxConfig

# engine key -> how the multiplexer treats a job's value: "request" (honoured per request),
# "context" (honoured up to the pool's), "inert" (no effect on a drained engine), "pool"
# (the pool's: another value refused), "fixed" (the engines' default: another value refused).
HOW: dict[str, str] = {
    "temperature": "request", "top_p": "request", "max_model_len": "context", "sync_in_flight": "inert",
    "backend": "pool", "max_batch": "pool", "num_engines": "pool",
    "kv_cache_gib": "pool", "gpu_memory_utilization": "pool", "enable_prefix_caching": "pool",
}
# The mux yaml key that sets each "pool" key (and max_model_len's ceiling).
MUX_KEY = {"backend": "backend", "max_batch": "max_batch", "num_engines": "engines_per_node",
           "max_model_len": "max_model_len", "kv_cache_gib": "kv_cache_gib",
           "gpu_memory_utilization": "gpu_memory_utilization", "enable_prefix_caching": "enable_prefix_caching"}
# Keys only one backend reads: on a pool of the other, a solo run would ignore them too.
ONLY_ON = {"max_batch": "hf", "kv_cache_gib": "vllm", "gpu_memory_utilization": "vllm",
           "enable_prefix_caching": "vllm"}


def pool_backend(m: MuxConfig) -> str:
    """The backend the pool's engines run (`auto` resolved as `resolve_backend` does)."""
    if m.backend != "auto":
        return m.backend
    return "vllm" if vllm_available() else "hf"


def set_engine_keys(spec: JobSpec, cfg: EngineConfig) -> set[str]:
    """The engine keys the job sets: named in its overrides (`engine.KEY=...`, `+engine.KEY`,
    `~engine.KEY`), or other than the default (its config files, an `engine=GROUP` choice).

    A config file that sets a key to its default value is not told apart from one that
    leaves it: for every key that is the value the pool would give such a job anyway,
    except max_model_len, where the pool's context is taken (module docstring)."""
    named = set()
    for override in spec.overrides:
        key = override.split("=", 1)[0].lstrip("~+")
        if key.startswith("engine."):
            named.add(key.split(".")[1])
    default = EngineConfig()
    differ = {f.name for f in dataclasses.fields(EngineConfig) if getattr(cfg, f.name) != getattr(default, f.name)}
    return named | differ


def engine_problems(spec: JobSpec, cfg: EngineConfig, m: MuxConfig) -> list[str]:
    """Each `engine.*` setting of the job the shared engines cannot honour, one line each."""
    backend = pool_backend(m)
    default = EngineConfig()
    out: list[str] = []
    for key in sorted(set_engine_keys(spec, cfg)):
        how, value = HOW.get(key, "fixed"), getattr(cfg, key)
        if ONLY_ON.get(key, backend) != backend:
            continue
        if how == "context" and value > m.max_model_len:
            out.append(f"engine.max_model_len={value} exceeds the shared engines' context: set mux.max_model_len "
                       f"(now {m.max_model_len}) to at least {value} in the mux yaml, or lower the job's")
        elif how == "pool":
            pool_value = getattr(m, MUX_KEY[key])
            if value == pool_value or (key == "backend" and value in ("auto", backend)):
                continue
            if key == "backend" and pool_value != backend:
                pool_value = f"{pool_value}, here {backend}"  # mux.backend=auto, resolved
            out.append(f"engine.{key}={value} is not honoured per job: the shared engines take "
                       f"mux.{MUX_KEY[key]} (now {pool_value}); set it in the mux yaml, or drop engine.{key} "
                       "from the job")
        elif how == "fixed" and value != getattr(default, key):
            out.append(f"engine.{key}={value} is not honoured per job: the shared {backend} engines are built with "
                       f"its default ({getattr(default, key)}) and no mux setting changes it; drop it from the job")
    return out


def pool_problem(cfg: Config) -> str:
    """The job's `pools` and `tasks[].pool` settings, in one line, if it sets any; else "".

    As for an engine key set to the pool's value, a setting equal to what the multiplexer
    gives every job (no pools, each task's pool `default`) is not told apart from one left
    alone, and passes: `pools=[]` or `tasks.0.pool=default` changes nothing."""
    default = Config()
    named = []
    if cfg.pools != default.pools:
        named.append(f"pools=[{', '.join(p.name for p in cfg.pools)}]")
    named += [f"tasks.{i}.pool={t.pool}" for i, t in enumerate(cfg.tasks) if t.pool != "default"]
    if not named:
        return ""
    what = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
    return (f"{what} {'are' if len(named) > 1 else 'is'} not honoured per mux job: its turns run on the "
            "multiplexer's shared engines (mux.* pool settings); remove pools and tasks[].pool from the job's config")


def on_pool_engines(spec: JobSpec, cfg: Config, m: MuxConfig) -> Config:
    """`cfg` (the job's) with the engine section the pool gives it; ConfigError naming the
    job, each key it sets that the shared engines cannot honour, and the mux key for it
    (its `pools` and `tasks[].pool` too: `pool_problem`)."""
    problems = engine_problems(spec, cfg.engine, m)
    pools = pool_problem(cfg)
    if pools:
        problems.append(pools)
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        raise ConfigError(f"job {spec.name}: {problems[0]}{more}")
    adopted = "max_model_len" not in set_engine_keys(spec, cfg.engine)
    cfg = copy.deepcopy(cfg)
    e = cfg.engine
    if adopted:
        e.max_model_len = m.max_model_len  # the pool's context: where the engines stop
    # What the engines are, recorded in the job's config.json (`JobRunner.setup`).
    e.backend, e.num_engines = pool_backend(m), m.engines_per_node
    e.kv_cache_gib, e.gpu_memory_utilization, e.enable_prefix_caching = (
        m.kv_cache_gib, m.gpu_memory_utilization, m.enable_prefix_caching)
    if e.backend == "hf":
        e.max_batch = m.max_batch
    try:
        return validate(cfg)  # a task's max_new_tokens against the pool's context, say
    except ConfigError as err:
        why = f" (engine.max_model_len is the pool's: mux.max_model_len={m.max_model_len})" if adopted else ""
        raise ConfigError(f"job {spec.name}: {err}{why}") from None
