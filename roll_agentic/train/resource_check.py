"""Does the run's hardware exist? Checked before any actor starts, not found out by a hang.

Ray leaves an actor that asks for a resource no node has pending for ever:
on a laptop, `trainer.device=cuda` with two workers, or a pool pinned to
`{gpu_h20: 1}`, would start everything else and then wait silently. On a
local Ray (no `ray.address`) the nodes are all there from the start, so the
run's whole demand (engines, env workers, trainer workers; GPUs and custom
resources, which actors hold for the whole run) is compared with what the
machine has, and a shortfall is a clear error. A cluster may grow
(autoscaling), so there a shortfall is a warning, said at once with who
asks for what (`cluster_shortfall_warning`): a typo such as `gpu_h2O`
otherwise left the run waiting with only Ray's autoscaler lines to go by.
"""

from __future__ import annotations

from collections import defaultdict

from roll_agentic.config import Config, effective_pools
from roll_agentic.engine.placement import placement


def trainer_in_process(cfg: Config) -> bool:
    """The trainer runs in the driver (train/job.py make_trainer), not in Ray workers."""
    t = cfg.trainer
    return t.num_workers == 1 and t.strategy == "ddp" and not t.resources


def in_process_device_error(cfg: Config, cuda_available: bool) -> str | None:
    if trainer_in_process(cfg) and cfg.trainer.device.startswith("cuda") and not cuda_available:
        return ("trainer.device=cuda, but torch sees no CUDA GPU on this machine, where the trainer runs "
                "(one worker runs in the driver). Use trainer.device=cpu, or run on a machine with a GPU "
                "and a CUDA build of torch")
    return None


def demand(cfg: Config) -> dict[str, list[tuple[str, float]]]:
    """Per resource, CPU slots too: (who asks, how much in all).

    CPU slots are Ray's logical ones (a local Ray has 16 unless `ray.num_cpus`
    says otherwise); `ray.num_cpus=1` with two engines left the second pending
    for ever."""
    asks: dict[str, list[tuple[str, float]]] = defaultdict(list)

    def add(who: str, resources: dict[str, float], count: int) -> None:
        for k, v in resources.items():
            if v > 0 and count > 0:
                asks[k].append((f"{who}: {count} x {v:g}", v * count))

    for pool in effective_pools(cfg):
        place = placement(pool.resources)
        add(f"pools[{pool.name}] engines", {"CPU": place.num_cpus, "GPU": place.num_gpus, **place.resources},
            pool.num_engines)
    env = placement(cfg.envs.resources, cfg.envs.num_cpus, cfg.envs.num_cpus)
    add("env workers (envs.resources)", {"CPU": env.num_cpus, "GPU": env.num_gpus, **env.resources},
        cfg.rollout.num_workers)
    if not trainer_in_process(cfg):
        t = cfg.trainer
        place = placement(t.resources, default_cpus=0.0, pinned_cpus=1.0)  # as train/parallel.py asks
        gpus = max(place.num_gpus, 1.0) if t.device.startswith("cuda") else place.num_gpus
        add("trainer workers", {"CPU": place.num_cpus, "GPU": gpus, **place.resources}, t.num_workers)
    return dict(asks)


def _short_lines(cfg: Config, available: dict[str, float], where: str, flag_absent: bool) -> list[str]:
    """A line per resource the run needs beyond `available`: who asks for how much, and what `where` has."""
    lines = []
    for res, asks in sorted(demand(cfg).items()):
        need = sum(n for _, n in asks)
        have = available.get(res, 0.0)
        if need > have + 1e-9:
            none = " (no node has it: a typo?)" if flag_absent and res not in available else ""
            lines.append(f"  {res}: {need:g} asked ({'; '.join(w for w, _ in asks)}), {have:g} {where}{none}")
    return lines


def shortfall_error(cfg: Config, available: dict[str, float]) -> str | None:
    """A message naming each resource the run needs beyond `available`; None if it fits."""
    lines = _short_lines(cfg, available, "on this machine", flag_absent=False)
    if not lines:
        return None
    cpu_hint = ("\nFor CPU slots: raise ray.num_cpus (Ray's logical slots; 0 = 16), or ask for fewer "
                "(pools[*].num_engines, envs.num_cpus)") if any(line.startswith("  CPU:") for line in lines) else ""
    return ("the run needs resources this machine's Ray does not have, so its actors would wait for ever:\n"
            + "\n".join(lines) + "\nOn a machine without GPUs use trainer.device=cpu and no GPU in pools[*].resources "
            "or envs.resources; for node types (e.g. gpu_h20), join a cluster that has them with ray.address=..."
            + cpu_hint)


def cluster_shortfall_warning(cfg: Config, available: dict[str, float]) -> str | None:
    """On a joined cluster: what the run asks for beyond its nodes now, as a warning; None if it fits."""
    lines = _short_lines(cfg, available, "in the cluster", flag_absent=True)
    if not lines:
        return None
    return ("warning: the run asks for more than the cluster's nodes have now; its actors wait until nodes "
            "that have it join (an autoscaler may add them), and otherwise for ever:\n" + "\n".join(lines))
