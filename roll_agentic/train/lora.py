"""LoRA: train low-rank adapters on the policy's linear layers, the base frozen.

`trainer.lora_rank=R` wraps each `nn.Linear` whose name ends in one of
`trainer.lora_targets` (all of a decoder's projections by default) so that

    y = x W^T + b + (alpha / R) * (x A^T) B^T

with W and b frozen, A (R x in) drawn as Kaiming-uniform and B (out x R)
zero: the first step starts from the base policy exactly. Only A and B get
gradients and AdamW moments, so the optimizer state is a few percent of a
full fine-tune's (what bounds the model that fits a trainer).

The engines never see the adapters: what the trainer publishes, checkpoints
and exports is the merged weight W + (alpha / R) B A under the model's own
Hugging Face names (`merged_state_dict`), so vLLM, the torch engine,
`model export` and `eval` take a LoRA run as they take any other. To resume
exactly, the adapters themselves ride in the trainer state (`adapter_state`):
a resumed run rebuilds the same base from `model.path` and loads them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from roll_agentic.config import TrainerConfig

# Every projection of a Llama/Qwen-style decoder layer: attention and MLP.
ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraLinear(nn.Module):
    """A frozen `nn.Linear` plus a trainable rank-`rank` update, scaled by `alpha / rank`."""

    enabled = True  # off inside `adapters_off`: the layer is its base

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.scale = alpha / rank
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=w.dtype, device=w.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=w.dtype, device=w.device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own init, as LoRA's paper code

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return self.base(x)
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale


def form_of(model_path: str, cfg: TrainerConfig) -> str:
    """The trainer form a run's state needs, in words: "full", or the LoRA shape and its base.

    Two runs of one form can swap states into one trainer (the multiplexer's warm switch); a
    run of another form needs a trainer built for it (its base loaded from storage)."""
    if not cfg.lora_rank:
        return "full"
    full = f" + {','.join(cfg.lora_full_modules)} whole" if cfg.lora_full_modules else ""
    return (f"lora r={cfg.lora_rank} alpha={cfg.lora_alpha:g} on {','.join(cfg.lora_targets)}{full}"
            f" of {Path(model_path).resolve()}")


def apply_lora(model: nn.Module, rank: int, alpha: float, targets: list[str] | tuple[str, ...],
               full: list[str] | tuple[str, ...] = ()) -> int:
    """Wraps the targeted linear layers and freezes everything else but the modules named in
    `full` (trained whole beside the adapters, PEFT's `modules_to_save`); returns how many
    layers were wrapped.

    ValueError, naming the model's layers, when any target names no linear layer (the default
    list, every projection, when none does) or a `full` name names no module.
    """
    # Module names, not list positions: "1" would pick the second decoder layer of every list.
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()} - {""}
    names = {n for n in names if not n.isdigit()}
    unknown = [f for f in full if f not in names]
    if unknown:
        raise ValueError(f"trainer.lora_full_modules {unknown} name no module of the model; its modules "
                         f"include {sorted(names)[:12]}")
    # Each target checked: one typo among right names ([q_proj, v_prj]) was dropped without a word.
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
    missing = [t for t in dict.fromkeys(targets) if t not in linear]
    # The default list (every projection) stays "those of them the model has": a model with fused
    # ones (qkv_proj, gate_up_proj) lacks some of its names. A list of the user's own is checked.
    if set(targets) == set(ALL_PROJECTIONS) and len(missing) < len(set(targets)):
        missing = []
    if missing:
        import difflib

        close = {t: difflib.get_close_matches(t, linear, n=1) for t in missing}
        hint = "; ".join(f"{t!r}: did you mean {c[0]!r}?" for t, c in close.items() if c)
        which = "none of the model's linear layers" if len(missing) == len(set(targets)) else \
            "no linear layer of the model"
        raise ValueError(f"trainer.lora_targets {missing} name {which}; its linear layers are named {linear}"
                         f"{f' ({hint})' if hint else ''}")
    wrapped = []
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child_name in targets:
                wrapped.append((module, child_name, child))
    model.requires_grad_(False)
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in full:
            module.requires_grad_(True)
    for parent, child_name, child in wrapped:
        setattr(parent, child_name, LoraLinear(child, rank, alpha))
    # The KL term's reference is the initial policy. With the adapters off, modules trained
    # whole still had their trained values (a tied lm_head with them): the reference followed
    # the policy and the KL term shrank toward 0. Their initial values, for `adapters_off`.
    model._lora_whole_initial = {n: p.detach().clone() for n, p in model.named_parameters()
                                 if p.requires_grad and n.rsplit(".", 1)[-1] not in ("lora_A", "lora_B")}
    return len(wrapped)


def shard_whole_initial(model: nn.Module) -> None:
    """After FSDP2 has sharded the model: each initial value kept for `adapters_off`, sharded
    as its parameter now is (a collective: every rank calls it, in the same order)."""
    initial = getattr(model, "_lora_whole_initial", None)
    if not initial:
        return
    from torch.distributed.tensor import distribute_tensor

    params = dict(model.named_parameters())
    model._lora_whole_initial = {
        n: distribute_tensor(start.to(params[n].device), params[n].device_mesh, params[n].placements)
        if hasattr(params[n], "device_mesh") else start for n, start in initial.items()}


@contextmanager
def adapters_off(model: nn.Module) -> Iterator[None]:
    """The base model, for as long as the block runs: the KL term's reference policy, with no
    second copy of the frozen weights (the one a full fine-tune keeps for it).

    Modules trained whole (`trainer.lora_full_modules`) take their initial values meanwhile,
    copied in place (a sharded parameter keeps its storage) and back after; run it under
    `torch.no_grad()`."""
    layers = [m for m in model.modules() if isinstance(m, LoraLinear)]
    initial = getattr(model, "_lora_whole_initial", {})
    params = dict(model.named_parameters()) if initial else {}  # by name: FSDP2 replaces the objects
    whole = [(params[n], start) for n, start in initial.items()]
    trained = [p.detach().clone() for p, _ in whole]
    for m in layers:
        m.enabled = False
    for p, start in whole:
        p.data.copy_(_shaped_as(start, p))
    try:
        yield
    finally:
        for m in layers:
            m.enabled = True
        for (p, _), now in zip(whole, trained, strict=True):
            p.data.copy_(now)


def _shaped_as(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """`value` (kept sharded under FSDP2) as `param` is now: sharded, or whole where FSDP2 holds
    the parameter gathered (the root's, between a forward and its backward). Gathering is a
    collective; every rank takes the same path."""
    if getattr(param, "device_mesh", None) is None and hasattr(value, "full_tensor"):
        return value.full_tensor()
    return value


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state under its Hugging Face names, each adapter merged into its weight (CPU copies).

    Under FSDP every tensor is gathered whole first: a collective, called on every rank in the
    same order (the state dict's).
    """
    layers = {name + ".": m for name, m in model.named_modules() if isinstance(m, LoraLinear)}
    with torch.no_grad():
        state = {k: _whole(v) for k, v in model.state_dict().items()}
        out: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            prefix = _lora_prefix(key, layers.keys())
            if prefix is None:
                out[key] = value
            elif key == prefix + "base.weight":
                merged = value + layers[prefix].scale * (state[prefix + "lora_B"] @ state[prefix + "lora_A"])
                out[prefix + "weight"] = merged
            elif key.startswith(prefix + "base."):
                out[prefix + key[len(prefix + "base."):]] = value
            # lora_A / lora_B: merged above, not an engine's tensor
    return out


def merge_adapters(base: dict[str, torch.Tensor], trained: dict[str, torch.Tensor],
                   scale: float) -> dict[str, torch.Tensor]:
    """`merged_state_dict` from state dicts, no model: the base's weights (Hugging Face names)
    with `adapter_state`'s tensors merged in (`X.lora_A`/`X.lora_B` into `X.weight`, a module
    trained whole replacing the base's). What a multiplexed LoRA job's resident copy (its trained
    tensors only: the frozen base is on no host) checkpoints while another job holds the trainer.
    """
    out = dict(base)
    for name, value in trained.items():
        if name.endswith(".lora_A"):
            prefix = name[: -len("lora_A")]
            weight, lora_b = base.get(prefix + "weight"), trained[prefix + "lora_B"]
            if weight is None or tuple(weight.shape) != (lora_b.shape[0], value.shape[1]):
                raise ValueError(f"the base has no {prefix}weight of the adapters' shape: not the model these "
                                 "adapters were trained on (its files changed or are gone)")
            out[prefix + "weight"] = weight + scale * (lora_b @ value)
        elif not name.endswith(".lora_B"):
            out[name] = value
    return out


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of the whole tensor (gathered from its shards under FSDP)."""
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    return t.detach().to("cpu").contiguous()


def _lora_prefix(key: str, prefixes) -> str | None:
    head = key.rsplit(".", 2)[0] + "."  # "...q_proj." of "...q_proj.base.weight"
    if head in prefixes:
        return head
    head = key.rsplit(".", 1)[0] + "."  # "...q_proj." of "...q_proj.lora_A"
    return head if head in prefixes else None


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trained tensors by name (CPU copies), the adapters and any module trained whole:
    what a resume needs beyond the base."""
    return {n: _whole(p).clone() for n, p in model.named_parameters() if p.requires_grad}


def load_adapter_state(model: nn.Module, adapters: dict[str, torch.Tensor]) -> None:
    """Loads `adapter_state`'s tensors; ValueError, in one line, when they are not this model's adapters."""
    own = {n: p for n, p in model.named_parameters() if p.requires_grad}
    wrong = sorted(own.keys() ^ adapters.keys())
    if not wrong:
        wrong = [n for n, p in own.items() if tuple(p.shape) != tuple(adapters[n].shape)]
    if wrong:
        raise ValueError(f"the checkpoint's LoRA adapters do not fit this trainer ({len(wrong)} differ, e.g. "
                         f"{wrong[0]}): resume with the run's own trainer.lora_rank, lora_targets and lora_full_modules")
    with torch.no_grad():
        for n, p in own.items():
            value = adapters[n].to(p.device, p.dtype)
            if hasattr(p, "device_mesh"):  # FSDP: each rank keeps its shard of the whole tensor
                from torch.distributed.tensor import distribute_tensor

                value = distribute_tensor(value, p.device_mesh, p.placements)
            p.copy_(value)
