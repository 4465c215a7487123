"""`roll-agentic bench <name> --json`: benchmarks that compare two things in one run.

Each benchmark module registers itself with `add_parser(subparsers)` and
prints a JSON object on its last line.
"""

from __future__ import annotations

import importlib
import json

BENCHMARKS = ["engine", "rollout", "serverless", "tail", "reliability"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks; each prints a JSON object on its last line")
    sub = p.add_subparsers(dest="bench_command", required=True)
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"roll_agentic.bench.{name}")
        except ImportError:
            continue  # not built yet in this checkout
        module.add_parser(sub)


def report(result: dict, json_only: bool) -> int:
    """A readable table unless --json, then the JSON object as the last line."""
    if not json_only:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    print(json.dumps(result))
    return 0
