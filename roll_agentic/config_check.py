"""Range and cross-field checks of a composed Config that Hydra's types cannot express.

`validate` runs after Hydra has refused unknown keys and wrong types
(hydra_config.load_config) and wherever a Config is built in code (the
multiplexer's jobs, policy_eval); each problem is one line that names the key,
what was expected and what was given.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from roll_agentic.config import (
    ADVANTAGE_ESTIMATORS,
    LOSS_AGGREGATIONS,
    Config,
    ConfigError,
    _check,
    effective_pools,
)
from roll_agentic.train.lr_schedule import SCHEDULES

TASK_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a task name: it names metrics and TensorBoard tags
LAMBDA_MAX_TIMEOUT_S = 900  # AWS Lambda's longest function timeout


def _uses_reward_timeout(ref: str) -> bool:
    """Whether deploying reward `ref` takes reward.timeout_s as its function timeout: it does unless
    its module declares LAMBDA_TIMEOUT_S (a module not found: assumed to, as it is reported anyway)."""
    try:
        from roll_agentic.reward.reward_ref import source_file
        from serverless.deploy import module_settings

        return "LAMBDA_TIMEOUT_S" not in module_settings(source_file(ref))
    except Exception:  # noqa: BLE001 - a missing or broken module: other checks say what is wrong
        return True


def _fills(template: str) -> bool:
    """Whether the worker's `template.format(observation=obs)` works and shows the observation."""
    try:
        return template.format(observation="\0") != template.format(observation="")
    except (KeyError, IndexError, ValueError, AttributeError):
        return False


def _non_finite(node: Any, key: str) -> list[tuple[str, float]]:
    """(key, value) of each inf or nan in `node` (a config dataclass, walked).

    The range checks below compare, so nan fails them, but inf passed every "> 0":
    trainer.lr=inf trained to nan weights and reward.timeout_s=inf failed every call."""
    out: list[tuple[str, float]] = []
    if isinstance(node, float) and not math.isfinite(node):
        out.append((key, node))
    elif dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            if f.name != "env_kwargs":  # the env's own arguments: its author decides
                out += _non_finite(getattr(node, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _non_finite(v, f"{key}.{i}")
    elif isinstance(node, dict):
        for k, v in node.items():
            out += _non_finite(v, f"{key}.{k}")
    return out


def validate(cfg: Config) -> Config:
    """Checks ranges and cross-field rules; raises ConfigError naming the first bad key."""
    # Here, not at the top: importing roll_agentic.reward loads its clients, which import roll_agentic.config.
    from roll_agentic.reward.reward_ref import function_stem, stem_clashes, syntax_problem

    e: list[str] = []
    for key, value in _non_finite(cfg, ""):
        _check(e, False, key, "a finite number", value)
    _check(e, cfg.engine.backend in ("auto", "vllm", "hf"), "engine.backend", "one of auto, vllm, hf", cfg.engine.backend)
    _check(e, cfg.engine.sync_in_flight in ("recompute", "keep"), "engine.sync_in_flight", "recompute or keep",
           cfg.engine.sync_in_flight)
    _check(e, cfg.engine.num_engines >= 1, "engine.num_engines", "an integer >= 1", cfg.engine.num_engines)
    # Below 1e-5 both engines decode greedily (vLLM's threshold) and report unscaled logprobs,
    # while the trainer scores logits / T: the ratio was off on the very weights that sampled,
    # and every reply of a group was the same, so there was nothing to learn.
    _check(e, cfg.engine.temperature >= 1e-5, "engine.temperature",
           "a number >= 1e-5 (below, sampling is greedy: a group's replies are all the same)",
           cfg.engine.temperature)
    _check(e, 0 < cfg.engine.top_p <= 1, "engine.top_p", "a number in (0, 1]", cfg.engine.top_p)
    _check(e, cfg.engine.max_model_len >= 64, "engine.max_model_len", "an integer >= 64", cfg.engine.max_model_len)
    _check(e, cfg.engine.max_batch >= 1, "engine.max_batch", "an integer >= 1", cfg.engine.max_batch)
    _check(e, cfg.engine.kv_cache_gib > 0, "engine.kv_cache_gib", "a number > 0", cfg.engine.kv_cache_gib)
    _check(e, 0 < cfg.engine.gpu_memory_utilization <= 1, "engine.gpu_memory_utilization", "a number in (0, 1]",
           cfg.engine.gpu_memory_utilization)
    _check(e, cfg.algo.adv_eps > 0, "algo.adv_eps", "a number > 0", cfg.algo.adv_eps)
    _check(e, cfg.rollout.env_step_timeout_s > 0, "rollout.env_step_timeout_s", "a number of seconds > 0",
           cfg.rollout.env_step_timeout_s)
    _check(e, cfg.rollout.generate_timeout_s > 0, "rollout.generate_timeout_s", "a number of seconds > 0",
           cfg.rollout.generate_timeout_s)
    _check(e, cfg.rollout.max_failing_s > 0, "rollout.max_failing_s", "a number of seconds > 0",
           cfg.rollout.max_failing_s)
    _check(e, cfg.reward.timeout_s > 0, "reward.timeout_s", "a number of seconds > 0", cfg.reward.timeout_s)
    _check(e, cfg.trainer.max_grad_norm > 0, "trainer.max_grad_norm", "a number > 0", cfg.trainer.max_grad_norm)
    _check(e, cfg.trainer.weight_decay >= 0, "trainer.weight_decay", "a number >= 0", cfg.trainer.weight_decay)
    _check(e, cfg.ray.num_cpus >= 0, "ray.num_cpus", "an integer >= 0 (0 = 16 logical slots)", cfg.ray.num_cpus)
    _check(e, cfg.envs.num_cpus >= 0, "envs.num_cpus", "a number >= 0", cfg.envs.num_cpus)
    plain_name = re.fullmatch(r"[\w.-]+", cfg.run_name) is not None and cfg.run_name not in (".", "..")
    _check(e, cfg.run_name == "" or plain_name, "run_name",
           "a plain directory name (letters, digits, . _ -), or empty for a timestamp", cfg.run_name)
    _check(e, cfg.algo.alpha >= 0, "algo.alpha", "an integer >= 0 (0 = synchronous)", cfg.algo.alpha)
    _check(e, cfg.algo.groups_per_step >= 1, "algo.groups_per_step", "an integer >= 1", cfg.algo.groups_per_step)
    _check(e, 0 < cfg.algo.clip_eps < 1, "algo.clip_eps", "a number in (0, 1)", cfg.algo.clip_eps)
    _check(e, cfg.algo.clip_eps_high == 0 or cfg.algo.clip_eps <= cfg.algo.clip_eps_high < 1,
           "algo.clip_eps_high", f"0 (off) or a number in [algo.clip_eps = {cfg.algo.clip_eps}, 1)",
           cfg.algo.clip_eps_high)
    _check(e, cfg.algo.dual_clip == 0 or cfg.algo.dual_clip > 1, "algo.dual_clip", "0 (off) or a number > 1",
           cfg.algo.dual_clip)
    _check(e, cfg.algo.loss_agg in LOSS_AGGREGATIONS, "algo.loss_agg", f"one of {', '.join(LOSS_AGGREGATIONS)}",
           cfg.algo.loss_agg)
    _check(e, cfg.algo.advantage in ADVANTAGE_ESTIMATORS, "algo.advantage",
           f"one of {', '.join(ADVANTAGE_ESTIMATORS)}", cfg.algo.advantage)
    _check(e, cfg.algo.kl_coef >= 0, "algo.kl_coef", "a number >= 0", cfg.algo.kl_coef)
    _check(e, cfg.algo.entropy_coef >= 0, "algo.entropy_coef", "a number >= 0", cfg.algo.entropy_coef)
    _check(e, cfg.algo.target_kl >= 0, "algo.target_kl", "a number >= 0 (0 = off)", cfg.algo.target_kl)
    _check(e, cfg.algo.name == "grpo", "algo.name", "grpo", cfg.algo.name)
    _check(e, cfg.rollout.mode in ("async", "tail_batching"), "rollout.mode", "async or tail_batching", cfg.rollout.mode)
    _check(e, cfg.rollout.num_workers >= 1, "rollout.num_workers", "an integer >= 1", cfg.rollout.num_workers)
    _check(e, cfg.rollout.groups_in_flight >= 1, "rollout.groups_in_flight", "an integer >= 1", cfg.rollout.groups_in_flight)
    _check(e, cfg.rollout.eta >= 1.0, "rollout.eta", "a number >= 1.0", cfg.rollout.eta)
    _check(e, cfg.rollout.eta_responses >= 1.0, "rollout.eta_responses", "a number >= 1.0", cfg.rollout.eta_responses)
    if cfg.rollout.mode == "tail_batching":
        # Its rounds take the first groups to finish: a dropped one would leave a round short.
        _check(e, not cfg.rollout.drop_no_signal_groups, "rollout.drop_no_signal_groups",
               "false with rollout.mode=tail_batching (its rounds keep the groups that finish first)",
               cfg.rollout.drop_no_signal_groups)
        _check(e, cfg.algo.alpha == 0, "algo.alpha", "0 with rollout.mode=tail_batching (it is synchronous)", cfg.algo.alpha)
        # Streamed gradients make one optimizer step per round: further epochs would be ignored.
        _check(e, cfg.trainer.ppo_epochs == 1, "trainer.ppo_epochs",
               "1 with rollout.mode=tail_batching (its streamed gradients make one step per round)",
               cfg.trainer.ppo_epochs)
    _check(e, cfg.eval.every >= 0, "eval.every", "an integer >= 0 (0 = off)", cfg.eval.every)
    _check(e, cfg.eval.episodes >= 1, "eval.episodes", "an integer >= 1", cfg.eval.episodes)
    _check(e, cfg.eval.temperature >= 0, "eval.temperature", "a number >= 0 (0 = greedy)", cfg.eval.temperature)
    _check(e, cfg.eval.seed >= 0, "eval.seed", "an integer >= 0", cfg.eval.seed)
    _check(e, cfg.trainer.total_steps >= 1, "trainer.total_steps", "an integer >= 1", cfg.trainer.total_steps)
    _check(e, cfg.trainer.lr > 0, "trainer.lr", "a number > 0", cfg.trainer.lr)
    _check(e, cfg.trainer.lr_schedule in SCHEDULES, "trainer.lr_schedule", f"one of {', '.join(SCHEDULES)}",
           cfg.trainer.lr_schedule)
    _check(e, 0.0 <= cfg.trainer.lr_min_ratio <= 1.0, "trainer.lr_min_ratio", "a number in [0, 1]",
           cfg.trainer.lr_min_ratio)
    _check(e, 0 <= cfg.trainer.lr_warmup_steps < max(cfg.trainer.total_steps, 1), "trainer.lr_warmup_steps",
           f"an integer >= 0 and fewer than trainer.total_steps ({cfg.trainer.total_steps})",
           cfg.trainer.lr_warmup_steps)
    _check(e, cfg.trainer.micro_batch_size >= 1, "trainer.micro_batch_size", "an integer >= 1", cfg.trainer.micro_batch_size)
    _check(e, cfg.trainer.ppo_epochs >= 1, "trainer.ppo_epochs", "an integer >= 1", cfg.trainer.ppo_epochs)
    _check(e, cfg.trainer.save_every >= 1, "trainer.save_every", "an integer >= 1", cfg.trainer.save_every)
    _check(e, cfg.trainer.keep_checkpoints >= 1, "trainer.keep_checkpoints", "an integer >= 1", cfg.trainer.keep_checkpoints)
    _check(e, cfg.trainer.resume or not cfg.trainer.resume_other_tasks, "trainer.resume_other_tasks",
           "false unless trainer.resume=true (it lets a resume change the tasks)", cfg.trainer.resume_other_tasks)
    _check(e, cfg.trainer.num_workers >= 1, "trainer.num_workers", "an integer >= 1", cfg.trainer.num_workers)
    _check(e, cfg.trainer.collective_timeout_s > 0, "trainer.collective_timeout_s", "a number of seconds > 0",
           cfg.trainer.collective_timeout_s)
    _check(e, cfg.trainer.strategy in ("ddp", "fsdp"), "trainer.strategy", "ddp or fsdp", cfg.trainer.strategy)
    _check(e, cfg.trainer.lora_rank >= 0, "trainer.lora_rank", "an integer >= 0 (0: no LoRA)", cfg.trainer.lora_rank)
    if cfg.trainer.lora_rank > 0:
        _check(e, cfg.trainer.lora_alpha > 0, "trainer.lora_alpha", "a number > 0", cfg.trainer.lora_alpha)
        _check(e, bool(cfg.trainer.lora_targets) and all(isinstance(t, str) and t for t in cfg.trainer.lora_targets),
               "trainer.lora_targets", "a non-empty list of linear layer names (e.g. [q_proj,v_proj])",
               cfg.trainer.lora_targets)
        _check(e, all(isinstance(t, str) and t for t in cfg.trainer.lora_full_modules), "trainer.lora_full_modules",
               "a list of module names (e.g. [embed_tokens])", cfg.trainer.lora_full_modules)
    _check(e, re.fullmatch(r"cpu|cuda(:\d+)?", cfg.trainer.device) is not None, "trainer.device",
           "cpu, cuda or cuda:N", cfg.trainer.device)
    _check(e, cfg.router.policy in ("affinity", "phase_aware"), "router.policy", "affinity or phase_aware", cfg.router.policy)
    _check(e, cfg.reward.mode in ("serverless", "local"), "reward.mode", "serverless or local", cfg.reward.mode)
    _check(e, cfg.reward.max_concurrency >= 1, "reward.max_concurrency", "an integer >= 1", cfg.reward.max_concurrency)
    _check(e, cfg.reward.max_retries >= 0, "reward.max_retries", "an integer >= 0", cfg.reward.max_retries)
    _check(e, bool(cfg.output_dir), "output_dir", "a directory path", cfg.output_dir)
    _check(e, len(cfg.tasks) >= 1, "tasks", "a list of at least one task", cfg.tasks)
    pool_names = {p.name for p in effective_pools(cfg)}
    _check(e, "default" in pool_names, "pools", "a pool named 'default' (it serves every task without its own)", sorted(pool_names))
    # Two different modules with one file stem would deploy to one Lambda function; with
    # reward.mode=local nothing is deployed, and each module is imported by its own name.
    clashing = stem_clashes([t.reward for t in cfg.tasks if not syntax_problem(t.reward)]) \
        if cfg.reward.mode == "serverless" else []
    if cfg.reward.mode == "serverless":
        # Lambda (and the emulator, which checks as it does) takes names of 1-64 letters, digits,
        # - and _: a prefix with a space or a colon failed in boto3 after Ray had started.
        longest = max((function_stem(t.reward) for t in cfg.tasks if not syntax_problem(t.reward)), key=len,
                      default="")
        name = cfg.reward.function_prefix + longest
        _check(e, re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) is not None, "reward.function_prefix",
               f"letters, digits, - and _ only, at most {64 - len(longest)} of them (with '{longest}' after it the "
               f"Lambda function name {name!r} must be at most 64 such characters)", cfg.reward.function_prefix)
        # It is the deployed functions' timeout (reward/service.py) for each module that declares no
        # LAMBDA_TIMEOUT_S of its own; Lambda takes 1-900 s, and deploying failed after Ray had started.
        if math.isfinite(cfg.reward.timeout_s) and round(cfg.reward.timeout_s) > LAMBDA_MAX_TIMEOUT_S:
            using = [t.reward for t in cfg.tasks if _uses_reward_timeout(t.reward)]
            _check(e, not using, "reward.timeout_s",
                   f"at most {LAMBDA_MAX_TIMEOUT_S} seconds with reward.mode=serverless (it is the Lambda function "
                   f"timeout of {', '.join(dict.fromkeys(using))}, and AWS Lambda's limit is "
                   f"{LAMBDA_MAX_TIMEOUT_S} s; or declare LAMBDA_TIMEOUT_S in the module)", cfg.reward.timeout_s)
    for first, second in clashing:
        e.append(f"tasks: rewards {first!r} and {second!r} would both be deployed as "
                 f"{cfg.reward.function_prefix}{function_stem(second)}; rename one module's file")
    seen: set[str] = set()
    for i, t in enumerate(cfg.tasks):
        k = f"tasks.{i}"  # as an override names it (tasks.0.max_turns=4)
        _check(e, bool(t.name) and t.name not in seen, f"{k}.name", "a unique non-empty name", t.name)
        # It names metrics and TensorBoard tags (reward/<name>/mean): a space or a slash made
        # keys a reader splits wrongly.
        _check(e, not t.name or bool(TASK_NAME.fullmatch(t.name)), f"{k}.name",
               "letters, digits, _, - and . only (it names the task's metrics, reward/<name>/mean)", t.name)
        seen.add(t.name)
        _check(e, bool(t.env_id), f"{k}.env_id", "a gymnasium id or module:Class", t.env_id)
        _check(e, t.max_turns >= 1, f"{k}.max_turns", "an integer >= 1", t.max_turns)
        _check(e, t.group_size >= 2, f"{k}.group_size", "an integer >= 2 (GRPO compares within a group)", t.group_size)
        _check(e, t.weight > 0, f"{k}.weight", "a number > 0", t.weight)
        if t.reward == "env_return":
            # In the env's own reward units, per unparseable reply (rewards/env_return.py): an env
            # that charges -1 a step (CliffWalking) needs more than 1, or replying garbage (not
            # stepped, so never charged) outscores every move and is what the policy learns.
            _check(e, t.format_penalty >= 0, f"{k}.format_penalty", "a number >= 0", t.format_penalty)
        else:
            _check(e, 0 <= t.format_penalty <= 1, f"{k}.format_penalty", "a number in [0, 1]", t.format_penalty)
        _check(e, t.max_new_tokens >= 1, f"{k}.max_new_tokens", "an integer >= 1", t.max_new_tokens)
        # A turn's budget that fills the context leaves no room for its prompt: the
        # episode ended before its first reply and trained on nothing.
        _check(e, t.max_new_tokens <= cfg.engine.max_model_len // 2, f"{k}.max_new_tokens",
               f"at most half of engine.max_model_len ({cfg.engine.max_model_len // 2}), leaving room for "
               "the conversation", t.max_new_tokens)
        problem = syntax_problem(t.reward)
        _check(e, not problem, f"{k}.reward", problem, t.reward)
        # The worker fills the template with str.format(observation=...) on the first turn: a
        # template that cannot be filled failed every episode, and one without {observation}
        # hid the env's first observation (the state) from the policy.
        _check(e, t.prompt_template == "" or _fills(t.prompt_template), f"{k}.prompt_template",
               "text with {observation} where the first observation goes (other braces doubled: {{ }})",
               t.prompt_template)
        _check(e, t.pool in pool_names, f"{k}.pool", f"one of the pools {sorted(pool_names)}", t.pool)
    pools_seen: set[str] = set()
    for i, p in enumerate(cfg.pools):
        # Two pools of one name were merged into one by the router, whatever their hardware.
        _check(e, p.name not in pools_seen, f"pools.{i}.name", "a name no other pool has", p.name)
        pools_seen.add(p.name)
        _check(e, p.num_engines >= 1, f"pools.{i}.num_engines", "an integer >= 1", p.num_engines)
        _check(e, p.price_per_hour >= 0, f"pools.{i}.price_per_hour", "a number >= 0", p.price_per_hour)
    # The router's cost model refuses these when it is built: inside its actor, after the
    # engines had started, and every episode then failed on its dead router.
    for name, h in cfg.router.hardware.items():
        k = f"router.hardware.{name}"
        _check(e, h.prefill_tokens_per_s > 0, f"{k}.prefill_tokens_per_s", "a number > 0", h.prefill_tokens_per_s)
        _check(e, h.decode_tokens_per_s > 0, f"{k}.decode_tokens_per_s", "a number > 0", h.decode_tokens_per_s)
        _check(e, h.price_per_hour >= 0, f"{k}.price_per_hour", "a number >= 0", h.price_per_hour)
    if cfg.router.policy == "phase_aware":
        # A pool whose class has no cost entry is never costed: every request silently took
        # its task's own pool, as under `affinity` (a class written H20 here and h20 there).
        known = sorted(cfg.router.hardware)
        for p in effective_pools(cfg):
            _check(e, p.hardware in cfg.router.hardware, f"pools[{p.name}].hardware",
                   f"a class router.policy=phase_aware can cost, one of router.hardware's {known} (names are "
                   "case-sensitive)", p.hardware)
    if e:
        raise ConfigError(e[0] if len(e) == 1 else f"{e[0]} (and {len(e) - 1} more: {'; '.join(e[1:])})")
    return cfg
