"""Admission: who can never run here (refused), and why a job waits (queued).

Refusals are decided before any work from the job's config; the reasons a
profiled job fits no group are read back from the same policy pieces the
placement used (saturation, host memory, the round-robin SLO check), so the
queue shows the rule that kept the job out, with numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from roll_agentic.config import Config
from roll_agentic.mux.candidates import group_candidates, memory_ok
from roll_agentic.mux.group import Group, is_saturated, other_form
from roll_agentic.mux.mux_config import MuxConfig
from roll_agentic.mux.profile import ClusterSpec, JobProfile, NodeClass, phase_times, planned
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on, members_of
from roll_agentic.rollout.task_check import task_problem

GB = 1e9  # the policy counts host memory in GB; the mux config in bytes
ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "vocab_size", "tie_word_embeddings")


def cluster_spec(m: MuxConfig) -> ClusterSpec:
    budget_gb = m.residency_budget_bytes / GB
    return ClusterSpec(rollout=NodeClass("rollout", 1, m.rollout_price_per_hour, budget_gb),
                       train=NodeClass("train", 1, m.train_price_per_hour, budget_gb),
                       warm_switch_s=m.warm_switch_s, cold_switch_s=m.warm_switch_s * 10)


def architecture(model_path: str) -> dict:
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return {k: cfg.get(k) for k in ARCH_KEYS}


def estimated_state_bytes(model_path: str, cfg: Config) -> int:
    """fp32 weights + AdamW's two moments (+ a KL reference copy), from the safetensors header.

    A LoRA job's resident state is its trained tensors and their moments (per targeted linear
    layer rank x (in + out), plus the modules trained whole), and its form's trainer while
    parked in host memory (`trainer_slot.py`): its frozen base and the same again, and the
    initial values of the modules trained whole (the KL term's reference, `lora.adapters_off`)."""
    from safetensors import safe_open

    shapes: dict[str, list[int]] = {}
    for f in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():  # noqa: SIM118 - safe_open is not a mapping
                shapes[k] = st.get_slice(k).get_shape()
    t = cfg.trainer
    if t.lora_rank:
        trained = lora_trained_numel(shapes, t.lora_rank, t.lora_targets, t.lora_full_modules)
        whole = sum(_prod(s) for k, s in shapes.items() if _trained_whole(k, t.lora_full_modules))
        frozen = sum(_prod(s) for s in shapes.values()) - whole
        return (2 * 3 * trained + frozen + whole) * 4
    copies = 3 + (1 if cfg.algo.kl_coef > 0 else 0)
    return sum(_prod(shape) for shape in shapes.values()) * 4 * copies


def lora_trained_numel(shapes: Mapping[str, list[int]], rank: int, targets: list[str], full: list[str]) -> int:
    """Parameters a LoRA trainer steps, from a checkpoint's tensor shapes (no model built)."""
    numel = 0
    for key, shape in shapes.items():
        parts = key.split(".")
        if _trained_whole(key, full):
            numel += _prod(shape)
        elif parts[-1] == "weight" and len(parts) > 1 and parts[-2] in targets and len(shape) == 2:
            numel += rank * (shape[0] + shape[1])
    return numel


def _trained_whole(key: str, full: list[str]) -> bool:
    """Is tensor `key` in a module LoRA trains whole (`trainer.lora_full_modules`)?"""
    return any(p in full for p in key.split(".")[:-1])


def placement_form(cfg: Config) -> str:
    """The job's form as the placement keeps forms apart (`JobProfile.form`): "lora" or "full".

    LoRA jobs of any base and shape share a training node (each form's trainer parks in host
    memory, `trainer_slot.py`); a full job after a LoRA one needs its trainer rebuilt from
    storage, a cold start the SLO check does not price, so the two kinds never share."""
    return "lora" if cfg.trainer.lora_rank else "full"


def _prod(shape: list[int]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def config_refusal(cfg: Config) -> str:
    """What refuses the job from its config alone: `mux run` and `mux submit` say it before
    anything starts, instead of a status line while the other jobs run."""
    if cfg.algo.alpha != 0:
        return ("algo.alpha must be 0 (algo=sync): phases are synchronous, a job's rollout uses exactly the "
                "weights its last train phase wrote, and no ticket may stay open across another job's phase")
    if cfg.rollout.mode != "async":
        # A long round spans several steps' rollouts: it cannot fit in one held rollout phase.
        return (f"rollout.mode must be async (not {cfg.rollout.mode!r}): a tail-batching long round spans "
                "several steps, and a multiplexed job's rollout ends with its phase; run it with "
                "`roll-agentic train` instead")
    if cfg.trainer.num_workers != 1 or cfg.trainer.resources:
        return "trainer.num_workers must be 1: a training node here is one trainer process"
    return ""


def refusal(cfg: Config, model_path: str, pool_model_path: str, m: MuxConfig) -> str:
    """Why the job can never run on this multiplexer; "" if it can."""
    problem = config_refusal(cfg)
    if problem:
        return problem
    problem = task_problem(cfg.tasks, cfg.reward.mode, cfg.rollout.env_step_timeout_s)
    if problem:
        return problem
    if architecture(model_path) != architecture(pool_model_path):
        return (f"model architecture {architecture(model_path)} differs from the rollout pool's "
                f"{architecture(pool_model_path)}: the shared engines load weights, not models")
    need = estimated_state_bytes(model_path, cfg)
    if need > m.residency_budget_bytes:
        what = "its adapters, their moments and its base" if cfg.trainer.lora_rank else "fp32 weights + Adam moments"
        return (f"job state ~{need} B ({what}) exceeds the residency budget of "
                f"{m.residency_budget_bytes} B per training node")
    return ""


def job_profile(name: str, prof: Mapping[str, float], slo: float, form: str) -> JobProfile:
    """A probed job as the policy sees it; `form`: its kind of trainer (`placement_form`)."""
    return JobProfile(name, "measured", "-", n_rollout=1, n_train=1, roll_s=prof["roll_s"],
                      train_s=prof["train_s"], sync_s=prof["sync_s"], local_sync_s=prof["sync_s"],
                      train_mem_gb=prof["state_bytes"] / GB, rollout_mem_gb=prof["weights_bytes"] / GB, slo=slo,
                      form=form)


def _group_reason(group: Group, job: JobProfile, spec: ClusterSpec, headroom: float) -> str:
    other = other_form(group, job.form)
    if other:
        return (f"group {group.group_id}: its training node runs a job of another trainer form ({other}, "
                f"this job: {job.form}); switching between them would rebuild the trainer from storage")
    if is_saturated(group, spec):
        return f"group {group.group_id}: saturated (no idle phase left to fill)"
    cands = group_candidates(group, job, spec)
    if not cands:
        free = {n.node_id: round(n.mem_free_gb * GB) for n in group.nodes.values()}
        return (f"group {group.group_id}: host memory: needs {round(job.train_mem_gb * GB)} B on a training node, "
                f"free {free}")
    cand = cands[0]
    if not memory_ok(group, job, cand):
        return f"group {group.group_id}: host memory too small for the job's state"
    fresh = max(group.nodes, default=0) + 1
    rollout = cand.rollout_nodes + tuple(range(fresh, fresh + cand.new_rollout))
    plans = [*members_of(group, spec),
             MemberPlan(planned(phase_times(job, len(rollout), len(cand.train_nodes), False, spec), job),
                        rollout, cand.train_nodes)]
    periods = evaluate_on(plans, spec)
    members = [*group.members.values(), job]
    worst = max(zip(members, periods, strict=True), key=lambda mp: mp[1] / (mp[0].slo * mp[0].planned_iter_s))
    p, t = worst
    return (f"group {group.group_id}: SLO: packed, {p.job_id} would run at {t / p.planned_iter_s:.2f}x its solo "
            f"iteration (SLO {p.slo:.2f}x, {headroom:.0%} kept as headroom)")


def queue_reason(groups: Mapping[int, Group], job: JobProfile, spec: ClusterSpec, headroom: float,
                 free_rollout: int, free_train: int) -> str:
    parts = [_group_reason(g, job, spec, headroom) for g in groups.values()]
    parts.append(f"a new group needs {job.n_rollout} rollout + {job.n_train} training node(s); free: "
                 f"{free_rollout} rollout, {free_train} training")
    return "; ".join(parts)
