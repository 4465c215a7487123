"""`roll-agentic bench`: every benchmark listed, and what its JSON line says about the machine it ran on."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from roll_agentic.bench.cli import machine_facts, print_result


def test_the_json_line_names_the_cpus_it_could_use(capsys):
    out = print_result({"speedup": 1.5})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(line) == out
    assert out["speedup"] == 1.5
    assert out["cpus_total"] == os.cpu_count()
    assert 1 <= out["cpus_usable"] <= out["cpus_total"]
    assert out["cpus_usable"] == machine_facts()["cpus_usable"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable CPUs to pin a process to one of them")
def test_a_process_pinned_to_fewer_cpus_is_told_so():
    # A real restriction, as a leftover `taskset` leaves it: the child pins itself to one CPU.
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from roll_agentic.bench.cli import print_result; print_result({'x': 1})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["cpus_usable"] == 1 and out["cpus_total"] == os.cpu_count()
    assert f"only 1 of the machine's {os.cpu_count()} CPUs" in done.stderr


def test_no_warning_with_every_cpu(capsys):
    if machine_facts()["cpus_usable"] < machine_facts()["cpus_total"]:
        pytest.skip("this test process itself is pinned to fewer CPUs than the machine has")
    print_result({})
    assert "warning" not in capsys.readouterr().err


def _bench_parser(monkeypatch, benchmarks: list[str]) -> argparse.ArgumentParser:
    from roll_agentic.bench import cli as bench_cli

    monkeypatch.setattr(bench_cli, "BENCHMARKS", benchmarks)
    parser = argparse.ArgumentParser(prog="roll-agentic")
    bench_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def _choices(parser: argparse.ArgumentParser, *path: str) -> dict[str, argparse.ArgumentParser]:
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_every_benchmark_imports_and_is_listed(monkeypatch):
    from roll_agentic.bench.cli import BENCHMARKS

    choices = _choices(_bench_parser(monkeypatch, list(BENCHMARKS)), "bench")
    assert list(choices) == BENCHMARKS
    assert not [n for n, p in choices.items() if p.prefix_chars == "\0"]  # none stands in for a failed import


@pytest.mark.parametrize("argv", [["bench", "lora"], ["bench", "lora", "--json", "--steps", "3"], ["bench", "lora", "-h"]])
def test_a_benchmark_that_fails_to_import_is_listed_and_says_why_when_run(monkeypatch, capsys, argv):
    """It was skipped as "not built yet": `bench lora` then said only argparse's "invalid choice"."""
    monkeypatch.setitem(sys.modules, "roll_agentic.bench.lora", None)  # its import now raises ImportError
    parser = _bench_parser(monkeypatch, ["engine", "lora"])
    assert "lora" in _choices(parser, "bench")
    args, extras = parser.parse_known_args(argv)
    assert extras == []  # its options are not refused before the import error is said
    assert args.func(args) == 1
    out, err = capsys.readouterr()
    assert err.startswith("bench lora: error: cannot import roll_agentic.bench.lora: ModuleNotFoundError: ")
    assert err.count("\n") == 1
    assert json.loads(out.strip().splitlines()[-1])["error"].startswith("cannot import roll_agentic.bench.lora")
