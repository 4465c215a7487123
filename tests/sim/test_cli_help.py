"""What `roll-agentic sim ... --help` says of a trace file, trainer forms and the re-plan search."""

from __future__ import annotations

from pathlib import Path

import pytest

from roll_agentic.cli import main

REPO = Path(__file__).resolve().parents[2]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["sim", *argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps anywhere


@pytest.mark.parametrize("command", ["compare", "repack"])
def test_trace_help_names_both_formats(command, capsys):
    """It said "a trace JSON file", but a CSV (conf/sim/jobs_example.csv) is read as well."""
    text = _help(capsys, command)
    assert ("--trace FILE a trace file: JSON (as --save-trace writes it) or CSV (one row per job, "
            "conf/sim/jobs_example.csv); default: generate one from --jobs/--seed") in text
    assert "a trace JSON file" not in text
    assert (REPO / "conf" / "sim" / "jobs_example.csv").is_file()


def test_every_trace_option_in_sim_says_csv_too():
    import argparse

    from roll_agentic.sim import cli

    commands = cli.add_parser(argparse.ArgumentParser().add_subparsers())._subparsers._group_actions[0].choices
    traces = {name: a for name, p in commands.items() for a in p._actions if "--trace" in a.option_strings}
    assert sorted(traces) == ["compare", "repack"]
    assert all(a.help == cli.TRACE_HELP and a.metavar == "FILE" for a in traces.values())


def test_forms_help_says_what_0_1_and_k_are(capsys):
    """"Default 0: one form" read as if K = 1 were not one form (README: K = 0 is one form for
    every job, K = 1 one base per model size)."""
    text = _help(capsys, "compare")
    assert "0 (the default): no forms, any jobs may share a group" in text
    assert "1: one base per model size, so only jobs of one size share" in text
    assert "K: each job draws one of K bases of its size" in text
    assert "Default 0: one form" not in text


@pytest.mark.parametrize("command", ["compare", "scale"])
def test_replan_budget_help_says_where_its_figures_come_from(command, capsys):
    """It said "about 7x the re-plans' time for 0.4 % more" without the run that measured it."""
    text = _help(capsys, command)
    assert "on sim compare's default 200-job trace, seed 0, with --replan 12" in text
    assert "0.96 s against 0.13 s" in text and "691.5 against 695.3" in text
