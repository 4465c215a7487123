"""Turning a config's "Ray resources per actor" into Ray's actor options.

Pools, env workers and trainer workers name the resources one actor needs,
e.g. {"gpu_h20": 1} for a node type, or {"GPU": 1} for a plain GPU. Ray
refuses "CPU" and "GPU" inside `resources` (they are `num_cpus`/`num_gpus`),
and a GPU engine needs `num_gpus` to be given a device (CUDA_VISIBLE_DEVICES),
so those two keys are lifted out here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Placement:
    num_cpus: float
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)  # custom resources only

    def options(self) -> dict:
        """Keyword arguments for `ray.remote(...)` / `.options(...)`."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources) or None}


def placement(resources: dict[str, float] | None, default_cpus: float = 1.0, pinned_cpus: float = 0.0) -> Placement:
    """`default_cpus` when nothing is named; `pinned_cpus` when a node type is named but no CPU count.

    An actor pinned to a node type by a custom resource takes no CPU slot by
    default, so a GPU node's few CPU slots do not limit how many engines it hosts.
    """
    res = {k: float(v) for k, v in (resources or {}).items()}
    num_gpus = res.pop("GPU", 0.0)
    if "CPU" in res:
        num_cpus = res.pop("CPU")
    else:
        num_cpus = pinned_cpus if (res or num_gpus) else default_cpus
    return Placement(num_cpus, num_gpus, res)
