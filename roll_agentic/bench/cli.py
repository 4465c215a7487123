"""`roll-agentic bench <name> --json`: benchmarks that compare two things in one run.

Each benchmark module registers itself with `add_parser(subparsers)` and
prints a JSON object on its last line, also when it fails: then the object
has an `error` (what failed, in words, beside whatever was measured before),
the same error is one line on stderr, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable

BENCHMARKS = ["engine", "rollout", "serverless", "tail", "reliability", "switch", "lora"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmarks; each prints a JSON object on its last line")
    sub = p.add_subparsers(dest="bench_command", required=True)
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"roll_agentic.bench.{name}")
        except ImportError as err:
            # Every benchmark exists: a failed import is a bug or a missing dependency. It was
            # skipped, and running it said only argparse's "invalid choice"; now it is listed
            # and running it says the import error.
            _add_unimportable(sub, name, err)
            continue
        module.add_parser(sub)


def _add_unimportable(sub, name: str, err: ImportError) -> None:
    """`bench <name>` for a module that failed to import: listed, and running it reports the error."""
    problem = " ".join(f"cannot import roll_agentic.bench.{name}: {type(err).__name__}: {err}".split())
    # No option prefix: whatever arguments it was given (`--json`, `-h`) are taken, not refused
    # as unrecognized, so the import error is what the user sees.
    p = sub.add_parser(name, help=f"({problem})", prefix_chars="\0", add_help=False)
    p.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=lambda _args: report({"error": problem}, True, name))


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


def report(result: dict, json_only: bool, name: str = "") -> int:
    """A readable table unless --json, then the JSON object as the last line; the exit status.

    A result with an `error` is a failed run: the error is said on stderr
    too, in one line, and the status is 1, so that a script that only checks
    the status does not take its partial figures for a measurement.
    """
    if not json_only:
        for k, v in result.items():
            print(f"{k:28s} {v}")
    error = result.get("error")
    if error:
        print(f"bench {name or 'run'}: error: {error}", file=sys.stderr, flush=True)
    print_result(result)
    return 1 if error else 0


def reporting_errors(name: str, main: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`main`, whose exceptions end in the JSON line too: `{"error": "Type: message"}`, exit 1.

    Before, a run that raised (a Ray `GetTimeoutError` from a stuck worker)
    ended in a traceback: whatever reads the last line (a sweep, CI) read a
    traceback's last line instead of JSON. A timeout is said in one line; any
    other exception is a bug, so its traceback goes to stderr first.
    Argument errors (SystemExit) are left as they are: nothing was run.
    """

    @functools.wraps(main)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return main(args)
        except Exception as err:  # noqa: BLE001 - whatever failed, the last line is JSON
            if not isinstance(err, TimeoutError):  # ray's GetTimeoutError is one
                traceback.print_exc(file=sys.stderr)
            message = " ".join(str(err).split()) or "(no message)"  # one line
            return report({"error": f"{type(err).__name__}: {message}"}, getattr(args, "json", True), name)

    return guarded
