"""`roll-agentic sim ...`: the cluster simulator from the command line.

  compare     all policies on one trace: $/h, SLO attainment, utilization
  optimality  RollMux versus the brute-force optimum on small instances
  scale       scheduler time to place a large trace's jobs
  repack      online RollMux vs the running jobs re-placed from scratch
  affinity    task-affine GPU pools versus a single pool (RollArt R1)

With --json the last line of output is one JSON object; without, a table.
"""

from __future__ import annotations

import argparse
import sys

from roll_agentic.arg_types import at_least, at_most
from roll_agentic.sim.cli_commands import (
    _census_line,  # noqa: F401 - re-exported: tests/sim/test_census.py reads it from here
    reporting_errors,
    run_affinity,
    run_compare,
    run_optimality,
    run_repack,
    run_scale,
)

# The flags' limits and their reasons live in cli_limits.py; all are named here too
# (`cli.MAX_JOBS`), where tests and callers have always found them.
from roll_agentic.sim.cli_limits import (  # noqa: F401 - re-exported, not only those used here
    BUDGET_WHY,
    FORMS_WHY,
    INSTANCES_WHY,
    JOBS_WHY,
    MAX_BUDGET,
    MAX_FORMS,
    MAX_INSTANCES,
    MAX_JOBS,
    MAX_OPTIMALITY_JOBS,
    MAX_REPLAN_BUDGET,
    MAX_SCALE_JOBS,
    MAX_SCALE_TRAIN,
    MAX_SNAPSHOTS,
    MIN_REPLAN_H,
    OPTIMALITY_JOBS_WHY,
    REPLAN_BUDGET_WHY,
    SCALE_JOBS_WHY,
    SCALE_TRAIN_WHY,
    SNAPSHOTS_WHY,
    hours,
    seed_ranges,
)

TRACE_HELP = (  # the .csv suffix picks the CSV reader (`Trace.load`)
    "a trace file: JSON (as --save-trace writes it) or CSV (one row per job, "
    "conf/sim/jobs_example.csv); default: generate one from --jobs/--seed"
)


def _replan_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--replan",
        type=hours,
        default=0.0,
        metavar="HOURS",
        help="every HOURS, re-place the running jobs of the groups that save least from scratch "
        "and move them between "
        "iterations where that is cheaper (beyond the paper; costs scheduler time; default 0: off)",
    )
    p.add_argument(
        "--replan-budget",
        type=at_most(0, MAX_REPLAN_BUDGET, REPLAN_BUDGET_WHY),
        default=0,
        metavar="N",
        help="with --replan: placements each re-plan's search may try (100: the search's ten "
        "seed plans: on sim compare's default 200-job trace, seed 0, with --replan 12, the "
        "re-plans took about 7x the time, 0.96 s against 0.13 s, for a 0.5 %% lower rollmux $/h, "
        "691.5 against 695.3); default 0: one plan, the dearest jobs first; at most "
        f"{MAX_REPLAN_BUDGET}",
    )


def _cluster_options(p: argparse.ArgumentParser) -> None:
    """The options `cli_commands._spec` reads beyond the switch flags: the hardware, and rollout node counts."""
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="YAML of your hardware: GPU classes, prices, host memory, switch costs "
        "(conf/sim/cluster_h20_h800.yaml is the default written out)",
    )
    p.add_argument(
        "--full-rollout",
        action="store_true",
        help="every job runs its rollouts on the rollout node count it was profiled on (by "
        "default a joining job may take fewer, and a member may drop rollout nodes only it "
        "uses, a longer rollout, when SLOs allow)",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    sim = subparsers.add_parser(
        "sim",
        help="cluster simulator for multi-job scheduling (RollMux)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = sim.add_subparsers(dest="sim_command", required=True)

    def common(
        p: argparse.ArgumentParser,
        jobs: int,
        min_jobs: int = 1,
        max_jobs: int = MAX_JOBS,
        jobs_why: str = JOBS_WHY,
        jobs_help: str = "number of jobs",
    ) -> None:
        p.add_argument(
            "--jobs",
            type=at_most(min_jobs, max_jobs, jobs_why),
            default=jobs,
            help=f"{jobs_help} (default: {jobs}, at most {max_jobs})",
        )
        p.add_argument("--seed", type=at_least(0), default=0, help="seed of the generated trace(s) (default: %(default)s)")
        p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
        p.add_argument(
            "--rehome",
            action="store_true",
            help="let RollMux move any job (not only lone ones) to a group where it costs less, "
            "between its iterations (beyond the paper; costs scheduler time)",
        )
        p.add_argument(
            "--share-any",
            action="store_true",
            help="let RollMux share any subset of a group's nodes and open training nodes too "
            "(beyond the paper's three candidate kinds)",
        )
        p.add_argument(
            "--bank-slack",
            action="store_true",
            help="hold a running job to the slowdown its whole run can still take: one that ran "
            "ahead of its SLO may run slower from then on, and its group takes more "
            "(beyond the paper; costs scheduler time)",
        )
        p.add_argument(
            "--scale-train",
            type=at_most(0, MAX_SCALE_TRAIN, SCALE_TRAIN_WHY),
            default=0,
            metavar="N",
            help="let a joining job train on up to N training nodes beyond its own, opened for "
            "it, when its shorter training lets it share (beyond the paper; pays off with "
            f"--rehome, which moves a job left alone on them; default 0: off; at most {MAX_SCALE_TRAIN})",
        )
        p.add_argument(
            "--no-migration",
            action="store_true",
            help="turn off long-tail migration (on by default: a rollout's stragglers move onto "
            "a few GPUs and the next rollout queued on its nodes starts on the rest)",
        )
        p.add_argument(
            "--rollout-fifo",
            action="store_true",
            help="rollout nodes serve queued rollouts first come, first served instead of in "
            "round-robin turns, so jobs that share only rollout nodes keep their own pace "
            "(beyond the paper; pays off with --share-any)",
        )
        _cluster_options(p)

    p = sub.add_parser(
        "compare",
        help="all policies on one trace",
        description="Simulate one trace (generated, or --trace FILE) under every policy: solo (each job "
        "on dedicated nodes), colocated (both phases on one pool of training GPUs), random, greedy "
        "(first group that fits) and rollmux. The table gives each policy's $/h (split into rollout "
        "and training nodes), how much dearer than rollmux, its SLO attainment, GPU utilization and "
        "mean slowdown; its footer says what each column means.",
    )
    common(p, 200)
    p.add_argument("--trace", metavar="FILE", help=TRACE_HELP)
    p.add_argument(
        "--arrival",
        choices=["poisson", "philly"],
        default="poisson",
        help="arrival process of a generated trace (default: %(default)s)",
    )
    p.add_argument(
        "--slo",
        nargs=2,
        type=float,
        metavar=("LO", "HI"),
        help="draw a generated trace's SLOs (tolerated slowdowns) from U(LO, HI) instead of "
        "U(1, 2), the paper's: what looser or tighter SLOs buy",
    )
    p.add_argument(
        "--forms",
        type=at_most(0, MAX_FORMS, FORMS_WHY),
        default=0,
        metavar="K",
        help="trainer forms of a generated trace: what LoRA jobs of several bases would cost if a "
        "switch between bases reloaded the trainer from storage (the multiplexer parks each base "
        "in host memory instead), jobs of different forms never sharing a group. 0 (the default): "
        "no forms, any jobs may share a group; 1: one base per model size, so only jobs of one "
        "size share; K: each job draws one of K bases of its size, so jobs share only with the "
        f"same size and base; at most {MAX_FORMS}",
    )
    p.add_argument("--save-trace", metavar="FILE", help="write the trace used to FILE as JSON")
    p.add_argument("--plot", metavar="DIR", help="write PNGs to DIR: a Gantt chart of phases per node per policy (the first 12 h), "
                        "cost over time, and slowdown against SLO per job")
    _replan_option(p)
    p.add_argument(
        "--seeds",
        type=seed_ranges,
        metavar="LIST",
        help="compare on one generated trace per seed, e.g. 0-4 or 0,3,7: a row per seed and "
        "the min / mean / max over them (instead of --seed)",
    )
    p.add_argument(
        "--workers",
        type=at_least(1),
        default=None,
        help="with --seeds: traces simulated at once, one process each (default: the CPU count)",
    )
    p.set_defaults(func=reporting_errors(run_compare))

    p = sub.add_parser(
        "optimality",
        help="RollMux vs brute-force optimum on small instances",
        description="Draw small instances (jobs that all start at once and run on), place them with "
        "RollMux and by exhaustive search over the same co-execution placements, simulate both, and "
        "compare their $ per unit of work (a job at its solo speed does 1). Ratios above 1: RollMux "
        "dearer than the optimum. The search covers disaggregated placements only, so colocated "
        "(one pool for both phases) can come out below it.",
    )
    # Instances draw 3 to --jobs jobs, each solved by exhaustive search: a limit of its own.
    common(p, 8, min_jobs=3, max_jobs=MAX_OPTIMALITY_JOBS, jobs_why=OPTIMALITY_JOBS_WHY,
           jobs_help="most jobs per instance: each draws 3 to this many")
    p.add_argument(
        "--instances",
        type=at_most(1, MAX_INSTANCES, INSTANCES_WHY),
        default=20,
        help=f"number of random instances (default: %(default)s, at most {MAX_INSTANCES})",
    )
    p.add_argument(
        "--budget",
        type=at_most(1, MAX_BUDGET, BUDGET_WHY),
        default=10_000,
        help="placements the search may try per instance (each one a memoised round-robin "
        "run); past it the optimum is the best found (reported as search_complete=false; "
        f"default: %(default)s, at most {MAX_BUDGET})",
    )
    p.add_argument(
        "--one-by-one",
        action="store_true",
        help="place the instance's jobs one at a time in arrival order (the paper's online "
        "rule) instead of as the batch they arrive in",
    )
    p.set_defaults(func=reporting_errors(run_optimality))

    p = sub.add_parser(
        "scale",
        help="scheduler time to place a large trace",
        description="Run RollMux over a generated trace of --jobs jobs and report the CPU time of "
        "every scheduling decision: placing arrivals, moves and trims between iterations, re-plans. "
        "CPU time depends on the machine: compare runs on one machine.",
    )
    common(p, 2000, max_jobs=MAX_SCALE_JOBS, jobs_why=SCALE_JOBS_WHY)
    _replan_option(p)
    p.set_defaults(func=reporting_errors(run_scale))

    p = sub.add_parser(
        "repack",
        help="online RollMux vs the running jobs re-placed from scratch, at instants",
        description="At a few instants of a RollMux run, price the groups it holds (online) against "
        "the same running jobs placed from scratch as one batch (repacked), and under solo and "
        "colocated: $/h per unit of progress. A repacked figure well below online is what a periodic "
        "re-plan (--replan) could win back.",
    )
    p.add_argument(
        "--jobs",
        type=at_most(1, MAX_JOBS, JOBS_WHY),
        default=200,
        help=f"number of jobs (default: %(default)s, at most {MAX_JOBS})",
    )
    p.add_argument("--seed", type=at_least(0), default=0, help="seed of the generated trace (default: %(default)s)")
    p.add_argument("--trace", metavar="FILE", help=TRACE_HELP)
    p.add_argument(
        "--snapshots",
        type=at_most(1, MAX_SNAPSHOTS, SNAPSHOTS_WHY),
        default=6,
        help="instants to compare at, spread evenly over the middle 80 %% of the jobs' arrival span "
        "(so a job arriving last is not running at any of them; a trace whose jobs arrive within "
        f"hours is seen while it fills) (default: %(default)s, at most {MAX_SNAPSHOTS})",
    )
    p.add_argument("--no-migration", action="store_true", help="turn off long-tail migration")
    p.add_argument(
        "--share-any", action="store_true", help="RollMux with --share-any's candidates"
    )
    p.add_argument(
        "--rollout-fifo", action="store_true", help="rollout nodes serve first come, first served"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    _cluster_options(p)
    p.set_defaults(func=reporting_errors(run_repack))

    p = sub.add_parser(
        "affinity",
        help="task-affine pools vs a single GPU pool",
        description="RollArt's hardware-affine routing at cluster scale, on a fixed multi-task job whose "
        "tasks differ in prefill/decode mix: the cost per trajectory when each task runs on the GPU "
        "class that suits it, against all tasks on one class. Ratios are single-pool cost over "
        "affine cost (above 1: affinity is cheaper). The per-class speeds and prices it assumed are "
        "in its --json output (not read from --cluster).",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(func=reporting_errors(run_affinity))
    return sim


def main(argv: list[str] | None = None) -> int:
    from roll_agentic.cli import name_commands

    parser = argparse.ArgumentParser(prog="roll-agentic")
    add_parser(parser.add_subparsers(dest="command", required=True))
    name_commands(parser)
    args = parser.parse_args(["sim", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
