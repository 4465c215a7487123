"""An operator's own hardware for the simulator: `sim ... --cluster FILE.yaml`.

The default cluster is the paper's (H20 rollout nodes, H800 training nodes
at 2.85x the price per GPU-hour, 1 TB of host memory each, a 135 s cold
start and a 71.5x faster warm one). Prices, node shapes and switch costs
change which placements pay, so an operator comparing schedulers for their
own cluster states theirs (`conf/sim/cluster_h20_h800.yaml` is the default
written out):

    rollout: {name: L40S, gpus_per_node: 8, price_per_gpu_hour: 0.9, host_mem_gb: 512}
    train: {name: H100, gpus_per_node: 8, price_per_gpu_hour: 2.5, host_mem_gb: 2048}
    cold_switch_s: 90
    warm_switch_s: 2

Any key left out keeps the default. Policy switches (`--no-migration`,
`--rollout-fifo`) stay flags: the file describes hardware only.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path

import yaml

from roll_agentic.mux.profile import ClusterSpec, NodeClass, out_of_range
from roll_agentic.sim.doc_file import listed_problems, read_doc

_INF = math.inf
# key: (type, then `profile.out_of_range`'s rule: lowest, highest, lowest itself allowed, in words)
_NODE_RULES: dict[str, tuple] = {
    "name": (str, "a name for the GPU class"),
    "gpus_per_node": (int, 1.0, _INF, True, "a whole number of GPUs >= 1"),
    "price_per_gpu_hour": (float, 0.0, _INF, False, "a price per GPU-hour, > 0"),
    "host_mem_gb": (float, 0.0, _INF, False, "GB of host memory per node, > 0"),
}
_SPEC_RULES: dict[str, tuple] = {
    "warm_switch_s": (float, 0.0, _INF, True, "seconds, >= 0"),
    "cold_switch_s": (float, 0.0, _INF, True, "seconds, >= 0"),
    "scale_efficiency": (float, 0.0, 1.0, False, "a fraction in (0, 1]"),
}
_POOLS = ("rollout", "train")


def _check(where: str, value: object, rule: tuple) -> tuple[object, str | None]:
    """The value as its type, or the problem with it."""
    kind, *limits = rule
    if kind is str:
        if isinstance(value, str) and value.strip():
            return value, None
        return None, f"{where} must be {limits[-1]}, got {value!r}"
    if isinstance(value, str):  # YAML 1.1 reads 1e12 (no dot) as text: take the number it spells
        try:
            value = float(value)
        except ValueError:
            return None, f"{where} must be {limits[-1]} (a number), got {value!r}"
    problem = out_of_range(where, value, tuple(limits))
    if problem is None and kind is int and value != int(value):  # type: ignore[call-overload]
        problem = f"{where} must be {limits[-1]}, got {value!r}"
    if problem:
        return None, problem
    return (int(value) if kind is int else float(value)), None  # type: ignore[arg-type]


def _node(where: str, raw: object, base: NodeClass) -> tuple[NodeClass | None, list[str]]:
    if not isinstance(raw, dict):
        return None, [f"{where} must be a mapping of {', '.join(_NODE_RULES)}, got {raw!r}"]
    problems = [
        f"{where}.{k}: unknown key; valid: {', '.join(_NODE_RULES)}" for k in raw if k not in _NODE_RULES
    ]
    values = {}
    for key, value in raw.items():
        if key in _NODE_RULES:
            checked, problem = _check(f"{where}.{key}", value, _NODE_RULES[key])
            if problem:
                problems.append(problem)
            else:
                values[key] = checked
    return (replace(base, **values) if not problems else None), problems


def load_cluster(path: str | Path, base: ClusterSpec | None = None) -> ClusterSpec:
    """`base` (default: the paper's cluster) with the file's hardware; ValueError listing every problem."""
    base = base or ClusterSpec()
    raw = read_doc(path, "cluster file", yaml.safe_load, yaml.YAMLError, "YAML")
    if raw is None:  # a file truncated, or the wrong one, ran the default cluster without a word
        raise ValueError(f"cluster file {path} states no hardware (it is empty, or comments only): give at least "
                         f"one of {', '.join(_POOLS + tuple(_SPEC_RULES))}, or leave out --cluster for the "
                         "default cluster")
    if not isinstance(raw, dict):
        raise ValueError(f"cluster file {path}: expected a mapping with {', '.join(_POOLS + tuple(_SPEC_RULES))}")
    problems: list[str] = []
    values: dict[str, object] = {}
    for key, value in raw.items():
        if key in _POOLS:
            node, bad = _node(key, value, getattr(base, key))
            problems += bad
            if node is not None:
                values[key] = node
        elif key in _SPEC_RULES:
            checked, problem = _check(key, value, _SPEC_RULES[key])
            if problem:
                problems.append(problem)
            else:
                values[key] = checked
        elif key in {f.name for f in fields(ClusterSpec)}:
            problems.append(f"{key}: a policy switch, not hardware; use its command-line flag")
        else:
            problems.append(f"{key}: unknown key; valid: {', '.join(_POOLS + tuple(_SPEC_RULES))}")
    warm = values.get("warm_switch_s", base.warm_switch_s)
    cold = values.get("cold_switch_s", base.cold_switch_s)
    if not problems and warm > cold:  # type: ignore[operator]
        problems.append(f"warm_switch_s ({warm:g}) is longer than cold_switch_s ({cold:g}): a warm switch loads "
                        "from host memory, a cold one from storage, so warm is the shorter")
    if problems:
        raise ValueError(f"cluster file {path}: {listed_problems(problems)}")
    return replace(base, **values)
