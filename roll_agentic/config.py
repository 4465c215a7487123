"""The configuration schema of a training run: the one source of truth.

Hydra composes `conf/` against these dataclasses (registered in its
ConfigStore), so an unknown key or a wrong type is refused before any work.
Range and cross-field checks that Hydra cannot express live in
config_check.validate (re-exported here), and every message names the key and
what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Group-relative advantage estimators (`algo.advantage`; train/advantages.py).
ADVANTAGE_ESTIMATORS = ("grpo", "grpo_no_std", "rloo")
# How a batch's token losses are combined (`algo.loss_agg`; train/loss.py).
LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean")


class ConfigError(ValueError):
    """A configuration a run cannot start with; the message is one line."""


@dataclass
class TaskConfig:
    name: str = "task"  # tag used in metrics, routing and grouping
    env_id: str = ""  # a registered gymnasium id, or `module:Class`
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 8  # an episode is truncated after this many agent turns
    reward: str = "env_return"  # module whose `reward(summary)` scores it: in rewards/, or my_pkg.mod
    group_size: int = 8  # GRPO: trajectories of the same task and seed
    weight: float = 1.0  # share of the groups of each step (async: rollout/step_mix.py)
    prompt_template: str = ""  # "" = the observation alone; else text around {observation}
    # reward lost to unparseable replies: the shaped rewards take it as a share of turns, in [0, 1];
    # env_return as the env's reward units per reply, so it must outweigh the env's cost of a step
    format_penalty: float = 0.1
    max_new_tokens: int = 8  # decode budget of one agent turn
    pool: str = "default"  # engine pool that serves this task's generation


@dataclass
class ModelConfig:
    path: str = ""  # a local Hugging Face checkpoint; "" = the tiny model below
    tiny_dir: str = ".cache/tiny-model"  # built on first use by `roll-agentic model tiny`
    # No dtype key: the trainer keeps float32 weights and the engines take float32 on the
    # CPU and the checkpoint's own dtype on a GPU (vLLM's "auto"); a key read by nothing was removed.


@dataclass
class EngineConfig:
    backend: str = "auto"  # auto (vllm where it imports, else hf) | vllm | hf
    num_engines: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_model_len: int = 1024
    kv_cache_gib: float = 1.0  # vLLM CPU KV cache size
    gpu_memory_utilization: float = 0.5
    enable_prefix_caching: bool = True
    max_batch: int = 64  # hf engine: requests decoded together
    # vLLM, a weight sync with requests in flight: "recompute" (MECHANISMS R4) aborts them and
    # each goes on from everything so far under the new weights, its KV cache recomputed;
    # "keep" freezes them and goes on over the old weights' KV blocks (no re-prefill: cheaper
    # where prefill is dear, e.g. on CPU; the sampled tokens' logprobs stay exact either way)
    sync_in_flight: str = "recompute"


@dataclass
class PoolConfig:
    name: str = "default"
    hardware: str = "cpu"  # hardware class, e.g. H800 / H20 / cpu
    num_engines: int = 1
    resources: dict[str, float] = field(default_factory=dict)  # Ray resources per engine
    price_per_hour: float = 0.0


@dataclass
class HardwareClassConfig:
    """Speed and price of one GPU class, for phase-aware routing (per engine)."""

    prefill_tokens_per_s: float = 10000.0
    decode_tokens_per_s: float = 500.0
    price_per_hour: float = 1.0


@dataclass
class RouterConfig:
    policy: str = "affinity"  # affinity (task -> pool map) | phase_aware (cost model per request)
    hardware: dict[str, HardwareClassConfig] = field(default_factory=dict)  # class name -> speeds/price


@dataclass
class EnvWorkersConfig:
    resources: dict[str, float] = field(default_factory=dict)  # Ray resources per rollout worker
    num_cpus: float = 0.0  # CPU slots reserved per rollout worker


@dataclass
class AlgoConfig:
    name: str = "grpo"
    alpha: int = 1  # staleness bound in weight versions; 0 = synchronous on-policy
    groups_per_step: int = 8  # GRPO groups in one training batch
    clip_eps: float = 0.2  # PPO clip range
    # > 0: the upper clip bound is 1 + clip_eps_high instead (DAPO's clip-higher, e.g. 0.28)
    clip_eps_high: float = 0.0
    # > 1: dual-clip PPO's c; a negative-advantage token's loss is at most c * |A| (e.g. 3)
    dual_clip: float = 0.0
    # token_mean: every generated token of the batch weighs the same (long replies weigh more);
    # seq_mean_token_mean: each trajectory's tokens are averaged first (GRPO as published)
    loss_agg: str = "token_mean"
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model and adds a k3 KL term
    entropy_coef: float = 0.005  # > 0 rewards the sampling distribution's entropy (against collapse)
    # > 0: after each step, the lr of the next shrinks when the step's KL overshot 2x this
    # and grows back under half of it (train/trust_region.py): a trust region on fresh samples
    target_kl: float = 0.0
    # grpo: (r - mean) / std within a group; grpo_no_std: r - mean (Dr. GRPO);
    # rloo: r - the others' mean (train/advantages.py)
    advantage: str = "grpo"
    adv_eps: float = 1e-6


@dataclass
class RolloutConfig:
    mode: str = "async"  # async | tail_batching
    num_workers: int = 2  # CPU Ray actors hosting environments
    groups_in_flight: int = 4  # per worker: groups whose episodes run concurrently
    eta: float = 1.25  # tail batching: over-provisioning of prompts (groups) in a short round
    eta_responses: float = 1.0  # ... and of responses per prompt (the paper: = eta; see tail_batching.py)
    # tail batching, several tasks: a long round also runs fresh prompts of the tasks its queued
    # prompts leave short of their share, so no step trains one task alone (see tail_batching.py)
    fill_long_rounds: bool = True
    # async mode: when the staleness bound lets no more groups start, workers take the
    # next step's tickets anyway, reset their envs and build the first prompts while the
    # trainer trains; generation still waits for the step (rollout/buffer.py)
    prepare_next_step: bool = True
    # async mode: a group whose rewards are all equal (advantage 0) is dropped and a fresh
    # prompt takes its place, up to 3x groups_per_step per step (DAPO's dynamic sampling)
    drop_no_signal_groups: bool = False
    env_step_timeout_s: float = 60.0
    # one generate request (one agent turn); past it the engine counts as failed, the
    # request is aborted there and the episode retries on another engine (engine_client.py)
    generate_timeout_s: float = 600.0
    # every group failing: how long (s, none succeeding) before the run stops, when the failures may
    # pass (an engine or the reward service restarting, time-outs). Failures of the task's own code
    # (a reward or env that raises on every episode) stop it at once, without this wait (rollout/buffer.py)
    max_failing_s: float = 300.0


@dataclass
class TrainerConfig:
    total_steps: int = 80
    # lr, schedule and entropy_coef were chosen together (README, "the default run
    # learns"): at a constant 1e-2 without the entropy term, on-policy runs
    # (algo=sync) fell into GRPO's dead zone on FrozenLake in about half the runs.
    lr: float = 5e-3
    lr_schedule: str = "cosine"  # constant | cosine | linear (train/lr_schedule.py)
    lr_min_ratio: float = 0.1  # cosine/linear: the last step's lr as a share of lr
    lr_warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 0.5
    micro_batch_size: int = 32
    ppo_epochs: int = 1
    save_every: int = 10  # steps between checkpoints (the last step always saves)
    keep_checkpoints: int = 2
    resume: bool = False
    # with resume: go on with this command line's tasks where they are not the run's (a
    # curriculum); the model, optimizer and step carry over, a dropped task's queued prompts go
    resume_other_tasks: bool = False
    seed: int = 0
    num_workers: int = 1  # data-parallel trainer workers
    strategy: str = "ddp"  # ddp | fsdp (GPU)
    device: str = "cpu"
    resources: dict[str, float] = field(default_factory=dict)
    # with num_workers > 1: how long a worker waits for the others in one collective; past
    # it (a worker dead or stuck) every worker stops and the run says how to resume
    collective_timeout_s: float = 600.0
    # LoRA (train/lora.py): 0 trains every weight; R > 0 trains rank-R adapters on the
    # linear layers named in lora_targets, the base frozen. Engines get merged weights.
    lora_rank: int = 0
    lora_alpha: float = 32.0  # the adapters' update is scaled by lora_alpha / lora_rank
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    # modules trained whole beside the adapters (PEFT's modules_to_save), e.g. [embed_tokens]
    lora_full_modules: list[str] = field(default_factory=list)


@dataclass
class RewardConfig:
    mode: str = "local"  # serverless | local
    endpoint_url: str = ""  # an existing Lambda-compatible service; "" = start the emulator
    region: str = "us-east-1"
    function_prefix: str = "roll-agentic-"
    max_concurrency: int = 16
    max_retries: int = 4
    timeout_s: float = 30.0


@dataclass
class RayConfig:
    address: str = ""  # "" = a fresh local Ray on loopback; else join this cluster
    num_cpus: int = 0  # a local Ray's logical CPU slots; 0 = 16 (actors are mostly idle or async)


@dataclass
class EvalConfig:
    """Held-out episodes on the current weights, never trained on (train/evaluation.py)."""

    every: int = 0  # steps between evaluations (and after the last step); 0 = off
    episodes: int = 16  # per task, on the same seeds every time
    temperature: float = 0.0  # 0 = greedy decoding
    seed: int = 1_000_000_000  # the first eval seed; training draws its seeds at random


@dataclass
class TelemetryConfig:
    progress: bool = True  # live display in the terminal
    tensorboard: bool = True
    plots: bool = True


def _default_tasks() -> list[TaskConfig]:
    return [
        TaskConfig(
            name="frozenlake",
            env_id="envs.frozenlake:FrozenLakeText",
            env_kwargs={"size": 3},
            max_turns=8,
            reward="frozenlake",
            group_size=8,
            max_new_tokens=4,
        ),
        TaskConfig(
            name="guess",
            env_id="envs.guess_number:GuessNumber",
            env_kwargs={"low": 1, "high": 8},
            max_turns=4,
            reward="guess_number",
            group_size=8,
            max_new_tokens=2,
        ),
    ]


@dataclass
class Config:
    run_name: str = ""  # "" = a timestamp
    output_dir: str = "outputs"
    tasks: list[TaskConfig] = field(default_factory=_default_tasks)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # [] = one pool named "default" of engine.num_engines engines on any node
    pools: list[PoolConfig] = field(default_factory=list)
    router: RouterConfig = field(default_factory=RouterConfig)
    envs: EnvWorkersConfig = field(default_factory=EnvWorkersConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def _check(errors: list[str], ok: bool, key: str, expected: str, got: Any) -> None:
    """Adds one problem line, `key: expected ..., got ...`, unless `ok`.

    Here rather than in config_check: mux/mux_config.py words its checks the same way."""
    if not ok:
        errors.append(f"{key}: expected {expected}, got {got!r}")


def effective_pools(cfg: Config) -> list[PoolConfig]:
    """The pools a run starts: the configured ones, or one default pool."""
    if cfg.pools:
        return list(cfg.pools)
    return [PoolConfig(name="default", hardware="any", num_engines=cfg.engine.num_engines)]
