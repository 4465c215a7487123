"""`sim` flags that size a run have upper bounds, checked as the command line is read.

Before, `sim scale --jobs 10000000` and `sim compare --scale-train 1000`
started and ran for hours (or until memory ran out) without a word, and
`--seeds 0-30000000` took 1.2 GB and 8 s just to be told it named too many
seeds; `--replan-budget` took any number, each re-plan searching that many
placements. Each bound is refused in one line naming the flag, the limit and why,
with argparse's exit status 2, before anything is simulated.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from roll_agentic.arg_types import at_most
from roll_agentic.sim import cli
from roll_agentic.sim.seeds import MAX_SEEDS

README = Path(__file__).resolve().parents[2] / "README.md"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roll-agentic")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    return _parser().parse_args(["sim", *argv])


def test_at_most_takes_the_range_and_says_why_past_it():
    parse = at_most(1, 10, "ten is plenty")
    assert parse("1") == 1 and parse("10") == 10
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be at most 10, got 11: ten is plenty"):
        parse("11")
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1, got 0"):
        parse("0")
    with pytest.raises(argparse.ArgumentTypeError, match="expected an integer"):
        parse("1e9")


@pytest.mark.parametrize(
    ("argv", "flag", "limit", "why"),
    [
        (["scale", "--jobs", "10000000"], "--jobs", cli.MAX_SCALE_JOBS, "runs for hours"),
        (["compare", "--jobs", "10000000"], "--jobs", cli.MAX_JOBS, "runs for hours"),
        (["compare", "--jobs", str(cli.MAX_JOBS + 1)], "--jobs", cli.MAX_JOBS, "sim compare --seeds"),
        (["repack", "--jobs", str(cli.MAX_JOBS + 1)], "--jobs", cli.MAX_JOBS, "runs for hours"),
        (["compare", "--scale-train", "1000"], "--scale-train", cli.MAX_SCALE_TRAIN, "scheduler time grows"),
        (["scale", "--scale-train", "1000"], "--scale-train", cli.MAX_SCALE_TRAIN, "scheduler time grows"),
        (["optimality", "--scale-train", "1000"], "--scale-train", cli.MAX_SCALE_TRAIN, "scheduler time"),
        # The brute force has a much smaller limit of its own.
        (["optimality", "--jobs", str(cli.MAX_OPTIMALITY_JOBS + 1)], "--jobs", cli.MAX_OPTIMALITY_JOBS,
         "exhaustive search"),
        (["optimality", "--instances", "100000"], "--instances", cli.MAX_INSTANCES, "exhaustive search"),
        (["optimality", "--budget", "1000000000000"], "--budget", cli.MAX_BUDGET, "9 min"),
        (["repack", "--snapshots", "1000000"], "--snapshots", cli.MAX_SNAPSHOTS, "re-places"),
        (["compare", "--forms", "1000"], "--forms", cli.MAX_FORMS, "no two jobs of one form"),
        # Before, any budget was taken: each re-plan searched that many placements, for hours.
        (["compare", "--replan-budget", "1000000"], "--replan-budget", cli.MAX_REPLAN_BUDGET,
         "scheduler time grows with N"),
        (["scale", "--replan-budget", str(cli.MAX_REPLAN_BUDGET + 1)], "--replan-budget", cli.MAX_REPLAN_BUDGET,
         "README's largest, 100"),
    ],
)
def test_a_flag_past_its_limit_is_refused_before_anything_runs(argv, flag, limit, why, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be at most {limit}, got" in err
    assert why in err


@pytest.mark.parametrize("seeds", ["0-10000000000", f"0-{MAX_SEEDS}", f"3,0-{10 * MAX_SEEDS}"])
def test_a_seed_range_too_wide_is_refused_before_it_is_listed(seeds, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", "--seeds", seeds])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --seeds: '{seeds.split(',')[-1]}' names" in err and f"more than {MAX_SEEDS}" in err


def test_seed_lists_keep_their_own_checks_and_the_limit_itself_parses():
    assert _parse(["compare", "--seeds", f"0-{MAX_SEEDS - 1}"]).seeds == f"0-{MAX_SEEDS - 1}"
    assert _parse(["compare", "--seeds", "4-2"]).seeds == "4-2"  # parse_seeds refuses it later, exit 2
    assert cli.main(["compare", "--seeds", "4-2"]) == 2


def test_forms_shape_a_generated_trace_only(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert cli.main(["compare", "--jobs", "6", "--save-trace", str(path), "--json"]) == 0
    assert cli.main(["compare", "--trace", str(path), "--forms", "2"]) == 2
    assert "--forms shapes a generated trace; a --trace file has its own" in capsys.readouterr().err


def test_every_limit_itself_is_accepted():
    assert _parse(["scale", "--jobs", str(cli.MAX_SCALE_JOBS)]).jobs == cli.MAX_SCALE_JOBS
    assert _parse(["compare", "--jobs", str(cli.MAX_JOBS)]).jobs == cli.MAX_JOBS
    assert _parse(["repack", "--jobs", str(cli.MAX_JOBS), "--snapshots", str(cli.MAX_SNAPSHOTS)]).snapshots == (
        cli.MAX_SNAPSHOTS
    )
    assert _parse(["compare", "--forms", str(cli.MAX_FORMS)]).forms == cli.MAX_FORMS
    args = _parse(["optimality", "--jobs", str(cli.MAX_OPTIMALITY_JOBS), "--instances", str(cli.MAX_INSTANCES),
                   "--budget", str(cli.MAX_BUDGET), "--scale-train", str(cli.MAX_SCALE_TRAIN)])
    assert (args.jobs, args.instances, args.budget, args.scale_train) == (
        cli.MAX_OPTIMALITY_JOBS, cli.MAX_INSTANCES, cli.MAX_BUDGET, cli.MAX_SCALE_TRAIN)
    for command in ("compare", "scale"):
        args = _parse([command, "--replan", "12", "--replan-budget", str(cli.MAX_REPLAN_BUDGET)])
        assert args.replan_budget == cli.MAX_REPLAN_BUDGET


def _readme_sim_commands() -> list[list[str]]:
    """Every `roll-agentic sim ...` command README gives, its placeholders filled in."""
    text = README.read_text()
    four = "--rollout-fifo --share-any --rehome --scale-train 1"  # README's "four options"
    out = []
    for cmd in re.findall(r"`roll-agentic sim ([^`]+)`", text):
        if cmd.strip() == "...":
            continue
        out.append(shlex.split(cmd.replace("LO HI", "1.5 2").replace("FLAGS", four).replace("--forms K", "--forms 4")))
    return out


def test_every_sim_command_in_the_readme_still_parses():
    commands = _readme_sim_commands()
    assert len(commands) >= 6, commands  # README lists compare, optimality, scale, repack, affinity
    # The largest values README runs with, each beside the command it belongs to.
    commands += [
        ["optimality", "--instances", "20", "--jobs", "8", "--budget", "2000000", "--json"],
        ["optimality", "--instances", "20", "--jobs", "8", "--rollout-fifo", "--share-any", "--json"],
        ["compare", "--seeds", "5-9", "--rollout-fifo", "--share-any", "--rehome", "--scale-train", "1",
         "--bank-slack", "--json"],
        ["scale", "--jobs", "2000", "--rollout-fifo", "--share-any", "--rehome", "--scale-train", "1", "--json"],
        ["scale", "--jobs", "2000", "--rollout-fifo", "--share-any", "--rehome", "--bank-slack", "--replan", "12",
         "--replan-budget", "100", "--json"],  # README's "all five, --replan-budget 100"
    ]
    parser = _parser()
    for argv in commands:
        args = parser.parse_args(["sim", *argv])  # SystemExit here would fail the test
        assert args.func is not None, argv
