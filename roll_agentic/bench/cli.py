"""`roll-agentic bench <name> --json`: benchmarks that compare two things in one run.

Each benchmark module registers itself with `add_parser(subparsers)` and
prints a JSON object on its last line.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

BENCHMARKS = ["engine", "rollout", "serverless", "tail", "reliability", "switch"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks; each prints a JSON object on its last line")
    sub = p.add_subparsers(dest="bench_command", required=True)
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"roll_agentic.bench.{name}")
        except ImportError:
            continue  # not built yet in this checkout
        module.add_parser(sub)


def standalone_main(name: str, add_parser, argv: list[str] | None = None) -> int:
    """`python -m roll_agentic.bench.<name> ARGS`: the same as `roll-agentic bench <name> ARGS`."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m roll_agentic.bench.{name}")
    add_parser(parser.add_subparsers(dest="bench", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


def machine_facts() -> dict[str, int]:
    """The CPUs this process may run on and the machine's: every figure depends on them."""
    total = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    return {"cpus_usable": usable, "cpus_total": total}


def print_result(result: dict) -> dict:
    """Prints `result` with the machine facts added, as one JSON line; returns what it printed.

    A process pinned to fewer CPUs than the machine has (a leftover `taskset`,
    a container's cpuset) hands the restriction to every process it starts,
    Ray's and vLLM's included: all of them then share those CPUs, and the
    figures come out lower than the machine allows. That is said on stderr,
    not only in the JSON.
    """
    facts = machine_facts()
    if facts["cpus_usable"] < facts["cpus_total"]:
        print(f"warning: this benchmark may use only {facts['cpus_usable']} of the machine's "
              f"{facts['cpus_total']} CPUs (the CPU affinity it inherited), and so may every process it "
              "starts; its figures will be lower than the machine allows. `taskset -p $$` shows a "
              "shell's mask; `taskset -p -a <mask> <pid>` widens one.", file=sys.stderr)
    out = {**result, **facts}
    print(json.dumps(out))
    return out


def report(result: dict, json_only: bool) -> int:
    """A readable table unless --json, then the JSON object as the last line."""
    if not json_only:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    print_result(result)
    return 0
