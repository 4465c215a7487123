"""What every benchmark's JSON line carries about the machine it ran on."""

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
