"""FSDP2 sharding of the policy for GPU data-parallel training (trainer.strategy=fsdp).

Every decoder layer and then the root module are wrapped with `fully_shard`.
Our loss is already divided by the token count of the whole batch, so the
reduce-scatter must *sum* gradients, not average them: the divide factor is 1.
The trainer then skips its own all-reduce (FSDP has reduced already) and
gathers full tensors when publishing weights to the engines.
"""

from __future__ import annotations

import torch


def is_sharded(model: torch.nn.Module) -> bool:
    return getattr(model, "_roll_agentic_fsdp", False)


def shard_model(trainer) -> None:
    from torch.distributed.fsdp import fully_shard

    model = trainer.model
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    for module in [*layers, model]:
        module.set_gradient_divide_factor(1.0)
        # A plain SUM, not NCCL's PREMUL_SUM(1/1): the same sum, and the one gloo
        # has too, so the sharded path also runs (and is tested) on CPU.
        module.set_force_sum_reduction_for_comms(True)
    model._roll_agentic_fsdp = True
    from roll_agentic.train.lora import shard_whole_initial

    shard_whole_initial(model)  # LoRA's modules trained whole: their KL reference values, sharded alike
    # The optimizer must see the sharded parameters (DTensors), so it is rebuilt.
    trainer.optimizer = torch.optim.AdamW(trainer.trainable(), lr=trainer.cfg.lr, weight_decay=trainer.cfg.weight_decay)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Gathers every shard; each rank gets the full tensors on CPU."""
    out = {}
    for k, v in model.state_dict().items():
        if hasattr(v, "full_tensor"):
            v = v.full_tensor()
        out[k] = v.detach().to("cpu").contiguous()
    return out


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer state as one rank-independent dict (gathered under FSDP), its tensors on
    CPU: a checkpoint saved from GPU tensors loads only where that GPU exists, and pins
    GPU memory while it is written. Tensors already on CPU are not copied."""
    if not is_sharded(model):
        state = optimizer.state_dict()
        return {**state, "state": {k: _on_cpu(v) for k, v in state["state"].items()}}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _on_cpu(value):
    """`value` (a tensor, or dicts/lists/tuples of them) with every tensor on CPU; CPU ones as they are."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.detach().to("cpu")
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def _names(keys: list[str], most: int = 5) -> str:
    more = f" and {len(keys) - most} more" if len(keys) > most else ""
    return f"{len(keys)} ({', '.join(keys[:most])}{more})"


def check_weights_fit(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Refuses, in one line, checkpoint weights that are not this model's: missing or
    unexpected names, or other shapes. Only a tied lm_head may be absent (the trainer
    saves the engines' state, which leaves it out: it is the embedding).

    The loads below are not strict because of that one tensor; without this check a
    checkpoint of another model (other names) or one missing tensors loaded what it
    could, left the rest as initialised, and only an optimizer that happened not to
    fit said anything, in an error about the optimizer.
    """
    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}  # DTensors: the global shape
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    missing = sorted(k for k in own.keys() - weights.keys() if not (tied and k.split(".")[-2:] == ["lm_head", "weight"]))
    unexpected = sorted(weights.keys() - own.keys())
    problems = []
    if missing:
        problems.append(f"missing {_names(missing)}")
    if unexpected:
        problems.append(f"unexpected {_names(unexpected)}")
    if not problems:
        wrong = [f"{k} {tuple(v.shape)} (model: {own[k]})" for k, v in sorted(weights.items())
                 if tuple(v.shape) != own[k]]
        if wrong:
            problems.append(f"other shapes for {_names(wrong, 3)}")
    if problems:
        raise ValueError(f"the checkpoint's weights do not fit this model ({model.__class__.__name__}): "
                         f"{'; '.join(problems)}. Resume with the model the run was started with "
                         "(model.path), from a complete checkpoint")


def load_full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    weights: dict[str, torch.Tensor], optim_state: dict) -> None:
    check_weights_fit(model, weights)  # before anything is loaded: a refusal leaves the model as it was
    if not is_sharded(model):
        model.load_state_dict(weights, strict=False)  # a tied lm_head is absent from weights (checked above)
    else:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))
    load_optimizer_state(model, optimizer, optim_state)


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, optim_state: dict) -> None:
    """`full_optimizer_state`'s dict into the optimizer (each rank takes its shards under FSDP)."""
    if not is_sharded(model):
        optimizer.load_state_dict(optim_state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, _keyed_by_name(model, optimizer, optim_state),
                             options=StateDictOptions(full_state_dict=True, strict=False))


def _keyed_by_name(model: torch.nn.Module, optimizer: torch.optim.Optimizer, optim_state: dict) -> dict:
    """`optim_state` keyed by parameter name, as FSDP's loader reads it.

    A plain trainer (one worker in the driver, or ddp) saves torch's own format,
    keyed by each parameter's position in the optimizer; FSDP's loader takes
    those positions for names and failed (KeyError 'state.0.step'), so a run
    could not go on under FSDP from a checkpoint of a plain run. Positions map
    to names in the optimizer's own order, as `Optimizer.load_state_dict` maps
    them; a state keyed by name already (saved under FSDP) is returned as is.
    """
    groups = optim_state.get("param_groups", [])
    saved = [k for g in groups for k in g["params"]]
    if not saved or all(isinstance(k, str) for k in saved):
        return optim_state
    names = {id(p): n for n, p in model.named_parameters()}
    ours = [names[id(p)] for g in optimizer.param_groups for p in g["params"]]
    if len(ours) != len(saved):
        raise ValueError(f"the checkpoint's optimizer holds {len(saved)} parameters, this model {len(ours)}")
    to_name = dict(zip(saved, ours, strict=True))
    return {"state": {to_name[k]: v for k, v in optim_state["state"].items()},
            "param_groups": [{**g, "params": [to_name[k] for k in g["params"]]} for g in groups]}
