"""Hardware-affine routing at cluster scale (RollArt R1, MECHANISMS.md section 1).

A multi-task job's tasks differ in their prefill/decode mix. A roofline
model gives each GPU class's time per trajectory of each task; multiplied
by price it gives cost per trajectory. Task-affine pools send every task to
the class where it is cheapest; a single pool sends all tasks to one class.
`affinity_vs_single_pool` = cost per trajectory on the cheaper single pool /
cost with task-affine pools (pools sized to their load, so no idle GPU is
charged to either side; generation only, training cost is the same in all).

Assumptions (all printed with the result):
- Prefill is compute-bound: 2 * params FLOPs per token at `mfu` of peak.
  Between turns an agent's KV cache is evicted (environment steps are slow
  and engines serve other trajectories meanwhile), so every turn re-prefills
  its whole context: this is what makes many-turn tasks prefill-heavy.
- A decode step of a batch of `batch` sequences reads the weights once and
  every sequence's KV cache, at `bw_eff` of peak bandwidth, or is bound by
  compute, whichever is slower.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GpuClass:
    name: str
    tflops: float  # dense bf16 peak
    hbm_tb_s: float
    price_per_hour: float  # relative: H800 = 2.85 x H20


@dataclass(frozen=True)
class Task:
    name: str
    weight: float  # share of the job's trajectories
    turns: int
    prompt_tokens: int  # first observation
    obs_tokens: int  # tokens each later observation adds
    decode_tokens: int  # tokens the policy generates per turn


@dataclass(frozen=True)
class ModelShape:
    params_b: float = 7.0
    kv_bytes_per_token: float = 57_344.0  # 28 layers x K,V x 4 kv-heads x 128 x bf16
    mfu: float = 0.5
    bw_eff: float = 0.6
    batch: int = 64


H20_GPU = GpuClass("H20", tflops=148.0, hbm_tb_s=4.0, price_per_hour=1.0)
H800_GPU = GpuClass("H800", tflops=989.0, hbm_tb_s=3.35, price_per_hour=2.85)

DEFAULT_TASKS = (
    Task("frozenlake", 0.25, turns=20, prompt_tokens=400, obs_tokens=120, decode_tokens=24),
    Task("sokoban", 0.25, turns=16, prompt_tokens=500, obs_tokens=160, decode_tokens=32),
    Task("webshop", 0.15, turns=10, prompt_tokens=1200, obs_tokens=700, decode_tokens=64),
    Task("math", 0.35, turns=1, prompt_tokens=300, obs_tokens=0, decode_tokens=6000),
)


def trajectory_gpu_s(task: Task, gpu: GpuClass, model: ModelShape) -> tuple[float, float]:
    """(prefill, decode) GPU-seconds of one trajectory of `task` on one `gpu`."""
    flops_per_token = 2.0 * model.params_b * 1e9
    prefill_tok_s = model.mfu * gpu.tflops * 1e12 / flops_per_token
    weight_bytes = 2.0 * model.params_b * 1e9
    prefill = decode = 0.0
    context = task.prompt_tokens
    for turn in range(task.turns):
        if turn:
            context += task.obs_tokens
        prefill += context / prefill_tok_s
        # Decode of this turn at its mean context; the batch shares weight reads.
        mean_ctx = context + task.decode_tokens / 2.0
        mem_s = (weight_bytes + model.batch * mean_ctx * model.kv_bytes_per_token) / (
            model.bw_eff * gpu.hbm_tb_s * 1e12
        )
        compute_s = model.batch * flops_per_token / (model.mfu * gpu.tflops * 1e12)
        decode += task.decode_tokens * max(mem_s, compute_s) / model.batch
        context += task.decode_tokens
    return prefill, decode


def affinity_report(
    tasks: tuple[Task, ...] = DEFAULT_TASKS,
    classes: tuple[GpuClass, ...] = (H20_GPU, H800_GPU),
    model: ModelShape | None = None,
) -> dict:
    model = model or ModelShape()
    per_task: dict[str, dict] = {}
    single = {c.name: 0.0 for c in classes}
    affine = 0.0
    routing: dict[str, str] = {}
    total_w = sum(t.weight for t in tasks)
    for task in tasks:
        costs = {}
        row: dict = {}
        for c in classes:
            pre, dec = trajectory_gpu_s(task, c, model)
            costs[c.name] = (pre + dec) * c.price_per_hour / 3600.0
            row[c.name] = {
                "prefill_gpu_s": round(pre, 3),
                "decode_gpu_s": round(dec, 3),
                "cost_per_trajectory": round(costs[c.name], 6),
            }
            single[c.name] += task.weight / total_w * costs[c.name]
        best = min(costs, key=costs.__getitem__)
        routing[task.name] = best
        affine += task.weight / total_w * costs[best]
        per_task[task.name] = row
    cheaper = min(single, key=single.__getitem__)
    return {
        "affinity_vs_single_pool": round(single[cheaper] / affine, 3),
        "cheaper_single_pool": cheaper,
        "affinity_vs_pool": {c: round(v / affine, 3) for c, v in single.items()},
        "cost_per_trajectory": {
            **{f"{c}_only": round(v, 6) for c, v in single.items()},
            "task_affine": round(affine, 6),
        },
        "routing": routing,
        "per_task": per_task,
        "assumed": {
            "gpu_classes": [asdict(c) for c in classes],
            "model": asdict(model),
            "tasks": [asdict(t) for t in tasks],
        },
        "paper": "1.30-1.68x over H20-only, 1.12-1.37x over H800-only (end to end)",
    }
