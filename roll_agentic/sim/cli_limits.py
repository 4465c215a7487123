"""The limits of `roll-agentic sim`'s flags: named bounds, each with its reason, and their argparse types.

Past these a run does not fail: it runs for hours or fills memory and says
nothing (`sim scale --jobs 10000000`). They are checked as the command line
is read (`arg_types.at_most`), so a typo is one line naming the flag, the
limit and why, before anything is simulated.
"""

from __future__ import annotations

import argparse

from roll_agentic.sim.trace import MAX_TRACE_JOBS

MIN_REPLAN_H = 0.1  # re-plans cost scheduler time as 1 / HOURS: 1e-4 h ran for minutes on 5 jobs

# Upper bounds of the flags that size a run, checked as the command line is read.
# Past them a run does not fail: it runs for hours or fills memory and says
# nothing (`sim scale --jobs 10000000`). Each leaves room well past the runs
# README measures; the message says what the limit is for.
# compare, repack: a generated trace spans 14 days whatever its size, so more jobs run at
# once and time grows faster than the count (200 jobs: 11 s; 2,000: 8 min on a loaded 2-core box).
MAX_JOBS = MAX_TRACE_JOBS  # 5,000; a --trace file is held to it too (sim/trace.py)
# scale: its trace's span grows with its jobs, so time grows about linearly (2,000 jobs: 45 s).
MAX_SCALE_JOBS = 20_000
MAX_OPTIMALITY_JOBS = 12  # the exhaustive search is for "up to ~8 jobs" (sim/optimal.py)
MAX_INSTANCES = 200  # README's run: 20 instances
MAX_BUDGET = 20_000_000  # README's largest: 2,000,000 placements per instance, 9 min
MAX_SCALE_TRAIN = 16  # README's runs use 1; a generated job trains on 1 or 2 nodes
MAX_SNAPSHOTS = 100  # README's run: 6 (the default)
MAX_FORMS = 100  # trainer forms per model size; README's runs: up to 8
# README's largest: 100, twice the scheduler time of 2,000 jobs. Past the seed plans each
# re-plan's search time grows with N (500 jobs, --replan 12: 100 in 9 s, 1,000 in 19 s, 10,000 in 140 s).
MAX_REPLAN_BUDGET = 10_000
JOBS_WHY = (
    "a generated trace spans 14 days whatever its size, so more jobs run at once and the run time "
    "grows faster than the job count (200 jobs take about 10 s, 2000 several minutes): a larger "
    "trace runs for hours. For more samples at the usual size: sim compare --seeds 0-9"
)
SCALE_JOBS_WHY = (
    "the run time grows with the job count (2000 jobs, README's run, take about 45 s), so a larger "
    "trace runs for hours"
)
OPTIMALITY_JOBS_WHY = (
    "the optimum is an exhaustive search whose size grows exponentially with the jobs of an "
    "instance; past about 8 it rarely finishes within --budget, and its 'optimum' is then only "
    "the best placement found (search_complete false)"
)
INSTANCES_WHY = (
    "each instance runs its own exhaustive search (seconds to minutes); README uses 20. For "
    "other draws of instances, change --seed"
)
BUDGET_WHY = (
    "the budget is placements tried per instance, each a simulated round-robin run; README's "
    "largest, 2000000, took 9 min for 20 instances"
)
SCALE_TRAIN_WHY = (
    "a generated job trains on 1 or 2 nodes and each node added brings 0.9 of one, so a few more "
    "is where it pays (README's figures use 1); every count up to N is planned for every job, so "
    "scheduler time grows with N"
)
FORMS_WHY = (
    "each is one base model per size the jobs are spread over; at 100 a 200-job trace has no two "
    "jobs of one form already"
)
SNAPSHOTS_WHY = "each snapshot re-places every running job from scratch; the default is 6"
REPLAN_BUDGET_WHY = (
    "every re-plan searches up to N placements, so the scheduler time grows with N: README's "
    "largest, 100, doubles it (30 s against 14 s on 2000 jobs), and 10000 took over 2 min on 500 "
    "jobs, so a larger budget runs for hours on a large trace"
)


def seed_ranges(text: str) -> str:
    """An argparse type for `--seeds`: a range wider than `MAX_SEEDS` is refused as the flags are read.

    `--seeds 0-30000000` once took 1.2 GB and 8 s to be told it names too
    many (a range was listed before it was counted; `parse_seeds` now counts
    first too). Here the refusal names the flag, as argparse's other limits
    do. Only each `LO-HI`'s width is checked here; the rest of the syntax,
    and the count over the whole list, is `parse_seeds`'s (run later).
    """
    from roll_agentic.sim.seeds import MAX_SEEDS

    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            width = int(hi) - int(lo) + 1 if dash else 1
        except ValueError:
            continue  # not a range of integers: parse_seeds says what is wrong with it
        if width > MAX_SEEDS:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} names {width} seeds, more than {MAX_SEEDS}: each seed is one "
                "full comparison (about 10 s at 200 jobs), so a typo such as 0-1000 would run for hours"
            )
    return text


def hours(text: str) -> float:
    """An argparse type: hours, 0 (off) or at least MIN_REPLAN_H."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected hours, got {text!r}") from None
    if not (value == 0.0 or MIN_REPLAN_H <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or at least {MIN_REPLAN_H} hours, got {text}")
    return value
