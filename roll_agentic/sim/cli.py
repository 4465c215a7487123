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
import functools
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from roll_agentic.arg_types import at_least, at_most
from roll_agentic.sim.options import RollMuxOptions
from roll_agentic.sim.trace import Trace, WorkloadSpec, generate_trace

if TYPE_CHECKING:
    from roll_agentic.mux.profile import ClusterSpec


MIN_REPLAN_H = 0.1  # re-plans cost scheduler time as 1 / HOURS: 1e-4 h ran for minutes on 5 jobs

# Upper bounds of the flags that size a run, checked as the command line is read.
# Past them a run does not fail: it runs for hours or fills memory and says
# nothing (`sim scale --jobs 10000000`). Each leaves room well past the runs
# README measures; the message says what the limit is for.
# compare, repack: a generated trace spans 14 days whatever its size, so more jobs run at
# once and time grows faster than the count (200 jobs: 11 s; 2,000: 8 min on a loaded 2-core box).
MAX_JOBS = 5_000
# scale: its trace's span grows with its jobs, so time grows about linearly (2,000 jobs: 45 s).
MAX_SCALE_JOBS = 20_000
MAX_OPTIMALITY_JOBS = 12  # the exhaustive search is for "up to ~8 jobs" (sim/optimal.py)
MAX_INSTANCES = 200  # README's run: 20 instances
MAX_BUDGET = 20_000_000  # README's largest: 2,000,000 placements per instance, 9 min
MAX_SCALE_TRAIN = 16  # README's runs use 1; a generated job trains on 1 or 2 nodes
MAX_SNAPSHOTS = 100  # README's run: 6 (the default)
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
SNAPSHOTS_WHY = "each snapshot re-places every running job from scratch; the default is 6"


def _seed_ranges(text: str) -> str:
    """An argparse type for `--seeds`: a range wider than `MAX_SEEDS` is refused before it is listed.

    `parse_seeds` (run later, for every other check) lists a range's seeds
    before it counts them: `--seeds 0-30000000` took 1.2 GB and 8 s to be told
    it names too many, and a few more zeros ran out of memory. Only each
    `LO-HI`'s width is checked here; the rest of the syntax is `parse_seeds`'s.
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


def _hours(text: str) -> float:
    """An argparse type: hours, 0 (off) or at least MIN_REPLAN_H."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected hours, got {text!r}") from None
    if not (value == 0.0 or MIN_REPLAN_H <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or at least {MIN_REPLAN_H} hours, got {text}")
    return value


def _generator_flags_unused(args: argparse.Namespace) -> None:
    """ValueError for the flags that shape a generated trace when a --trace file is given (they were dropped)."""
    if not args.trace:
        return
    given = [flag for flag, on in (("--seed", args.seed != 0), ("--jobs", args.jobs != 200),
                                   ("--arrival", getattr(args, "arrival", "poisson") != "poisson")) if on]
    if given:
        raise ValueError(f"{given[0]} shapes a generated trace; a --trace file has its own")


def _slo_range(args: argparse.Namespace) -> tuple[float, float]:
    """`--slo LO HI` of a generated trace, checked (default: the paper's 1 to 2)."""
    if args.slo is None:
        return WorkloadSpec().slo_range
    if args.trace:
        raise ValueError("--slo draws the SLOs of a generated trace; a --trace file has its own")
    lo, hi = args.slo
    if not 1.0 <= lo <= hi <= 100.0:
        raise ValueError(
            f"--slo {lo:g} {hi:g}: an SLO is a tolerated slowdown, so 1 <= LO <= HI (at most 100)"
        )
    return lo, hi


def _replan_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--replan",
        type=_hours,
        default=0.0,
        metavar="HOURS",
        help="every HOURS, re-place the running jobs of the groups that save least from scratch "
        "and move them between "
        "iterations where that is cheaper (beyond the paper; costs scheduler time; default 0: off)",
    )
    p.add_argument(
        "--replan-budget",
        type=at_least(0),
        default=0,
        metavar="N",
        help="with --replan: placements each re-plan's search may try (100: the search's ten "
        "seed plans, about 7x the re-plans' time for 0.4 %% more saving); default 0: one plan, the "
        "dearest jobs first",
    )


def _spec(args: argparse.Namespace) -> ClusterSpec:
    """The cluster a command runs on: `--cluster FILE`'s hardware (or the paper's) and the switch flags."""
    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.cluster_file import load_cluster

    base = ClusterSpec(
        migration=not args.no_migration,
        rollout_fifo=args.rollout_fifo,
        rollout_shrink=not args.full_rollout,
    )
    return load_cluster(args.cluster, base) if args.cluster else base


def _cluster_options(p: argparse.ArgumentParser) -> None:
    """The options `_spec` reads beyond the switch flags: the hardware, and rollout node counts."""
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


def _reporting_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input (an unreadable or malformed trace file) ends in one line on stderr, exit 2."""

    @functools.wraps(run)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except (ValueError, OSError) as err:  # OSError: e.g. --save-trace or --plot in a missing folder
            print(f"roll-agentic sim {args.sim_command}: error: {err}", file=sys.stderr)
            return 2

    return guarded


def _emit(args: argparse.Namespace, doc: dict, table: list[str]) -> int:
    if args.json:
        print(json.dumps(doc))
    else:
        print("\n".join(table))
    return 0


def _beyond_paper(doc: dict) -> list[str]:
    """The flags of RollMux options beyond the paper that a comparison ran with."""
    flags = RollMuxOptions.flags(doc["rollmux_options"])
    return flags + (["--rollout-fifo"] if doc["rollout_fifo"] else [])



def _compare_seeds(args: argparse.Namespace, slo_range: tuple[float, float]) -> int:
    from roll_agentic.sim.seeds import SeedRun, compare_seeds, parse_seeds, seeds_table

    # --seed too: each seed of the list is one trace's, and a --seed beside it was dropped unsaid.
    clash = [f for f, v in (("--trace", args.trace), ("--plot", args.plot),
                            ("--save-trace", args.save_trace), ("--seed", args.seed != 0)) if v]
    if clash:
        raise ValueError(f"--seeds generates one trace per seed; it does not combine with {clash[0]}")
    run = SeedRun(
        jobs=args.jobs,
        arrival=args.arrival,
        slo_range=slo_range,
        options=RollMuxOptions.from_args(args),
        spec=_spec(args),
    )
    doc = compare_seeds(parse_seeds(args.seeds), run, args.workers)
    rows = seeds_table(doc)
    flags = _beyond_paper(doc)
    if flags:
        rows[-1] += f"; beyond the paper: {' '.join(flags)}"
    return _emit(args, doc, rows)


def _writable_folder(folder: str) -> None:
    """ValueError naming `--plot` unless `folder` is (or is made) a folder a file can be written to.

    The plots are written after every policy is simulated: an unusable
    folder (a file of that name, no permission, a read-only mount) must be
    found first, and said with the flag's name, not a bare `[Errno 17]`.
    """
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"--plot {folder}: cannot write plots there: {err.strerror or err}") from None


def _compare(args: argparse.Namespace) -> int:
    from roll_agentic.sim.compare import compare

    slo_range = _slo_range(args)  # before a trace is read: --slo and --trace clash
    if args.seeds is not None:
        return _compare_seeds(args, slo_range)
    if args.workers is not None:
        raise ValueError("--workers sets how many of --seeds' traces run at once: give --seeds too")
    _generator_flags_unused(args)
    if args.plot:  # before minutes of simulation, not after
        _writable_folder(args.plot)
    if args.trace:
        trace = Trace.load(args.trace)
    else:
        trace = generate_trace(
            args.seed,
            WorkloadSpec(n_jobs=args.jobs, arrival=args.arrival, slo_range=slo_range),
        )
    if args.save_trace:
        try:
            trace.save(args.save_trace)
        except OSError as err:
            raise ValueError(
                f"--save-trace {args.save_trace}: cannot write the trace there: {err.strerror or err}"
            ) from None
    doc, results = compare(
        trace,
        spec=_spec(args),
        record=bool(args.plot),
        options=RollMuxOptions.from_args(args),
    )
    if args.plot:
        from roll_agentic.sim.plots import write_plots

        doc["plots"] = write_plots(results, args.plot)
    rows = [
        f"{'policy':<10} {'$/h':>9} {'$/h R':>8} {'$/h T':>7} {'vs rollmux':>10} {'SLO met':>8} "
        f"{'util':>6} {'util R':>8} {'util T':>6} {'slowdown':>9} {'alone':>6}"
    ]
    for name, cost in doc["cost_per_hour"].items():
        saving = doc.get("rollmux_saving", {}).get(name, 1.0)
        pools = {p: "-" if u is None else f"{u:.3f}" for p, u in doc["utilization_by_pool"][name].items()}
        spent = doc["cost_per_hour_by_pool"][name]
        rows.append(
            f"{name:<10} {cost:>9.1f} {spent['rollout']:>8.1f} {spent['train']:>7.1f} "
            f"{saving:>9.2f}x {doc['slo_attainment'][name]:>8.3f} "
            f"{doc['utilization'][name]:>6.3f} {pools['rollout']:>8} {pools['train']:>6} "
            f"{doc['mean_slowdown'][name]:>9.3f} {doc['cost_share_by_group_size'][name].get('1', 0.0):>6.3f}"
        )
    if "rollmux" in doc["cost_per_hour"]:
        rows.append(_census_line(doc))
    flags = _beyond_paper(doc)
    lo, hi = doc["slo_range"]
    rows.append(
        f"{doc['jobs']} jobs, seed {doc['seed']}, {doc['arrival']} arrivals, "
        + (
            f"SLOs {lo:g}-{hi:g} (as in the file); "
            if doc["arrival"] == "file"
            else f"SLOs from U({lo:g}, {hi:g}); "
        )
        + f"$/h over the solo span of {doc['reference_hours']} h; util: busy share of "
        "allocated GPU time; R, T: rollout, training nodes; alone: share of $ on groups of one job"
        + (f"; beyond the paper: {' '.join(flags)}" if flags else "")
        + (f"; cluster {args.cluster}" if args.cluster else "")
    )
    if args.plot:
        rows.append(f"plots ({len(doc['plots'])} PNGs) in {args.plot}")
    return _emit(args, doc, rows)


def _census_line(doc: dict) -> str:
    """Where rollmux's $ went: groups by size, and jobs alone by their SLO (`census.py`)."""
    sizes = doc["cost_share_by_group_size"]["rollmux"]
    alone = doc["alone_cost_share_by_slo"]["rollmux"]
    by_slo = ", ".join(f"SLO {band} {share:.1%}" for band, share in alone.items())
    by_size = ", ".join(f"{size} {share:.1%}" for size, share in sizes.items() if size != "1")
    return (
        f"rollmux's $: {sizes.get('1', 0.0):.1%} on jobs alone in their group ({by_slo}); "
        f"groups of {by_size}"
    )


def _optimality(args: argparse.Namespace) -> int:
    from roll_agentic.sim.compare import optimality

    doc = optimality(
        args.instances,
        args.jobs,
        args.seed,
        spec=_spec(args),
        node_budget=args.budget,
        options=RollMuxOptions.from_args(args),
        batch=not args.one_by_one,
    )
    rows = [
        f"{'#':>3} {'jobs':>4} {'rollmux/optimal':>16} {'rollmux SLO':>12} "
        f"{'solo/optimal':>13} {'colocated/optimal':>18}"
    ]
    for i, r in enumerate(doc["per_instance"]):
        rows.append(
            f"{i:>3} {r['jobs']:>4} {r['ratio']:>16.3f} {r['rollmux_slo']:>12.2f} "
            f"{r['solo_over_optimal']:>13.3f} {r['colocated_over_optimal']:>18.3f}"
        )
    rows.append(f"max ratio {doc['max_ratio_to_optimal']}, mean {doc['mean_ratio_to_optimal']}")
    saving = doc["optimal_saving"]
    rows.append(
        f"the optimum saves {saving['solo']['mean']}x over solo and "
        f"{saving['colocated']['mean']}x over colocated (mean per instance)"
    )
    return _emit(args, doc, rows)


def _scale(args: argparse.Namespace) -> int:
    from roll_agentic.sim.compare import scale, scale_table

    doc = scale(
        args.jobs,
        args.seed,
        spec=_spec(args),
        options=RollMuxOptions.from_args(args),
    )
    rows = scale_table(doc)
    flags = RollMuxOptions.flags(doc["rollmux_options"])
    if flags:  # beside the SLO line, which names the rollout nodes' service
        rows[4] += f"; beyond the paper: {' '.join(flags)}"
    return _emit(args, doc, rows)


def _repack(args: argparse.Namespace) -> int:
    from roll_agentic.sim.repack import repack_report

    _generator_flags_unused(args)
    if args.trace:
        trace = Trace.load(args.trace)
    else:
        trace = generate_trace(args.seed, WorkloadSpec(n_jobs=args.jobs))
    doc = repack_report(trace, _spec(args), args.snapshots, share_any=args.share_any)
    rows = [
        f"{'day':>6} {'jobs':>5} {'online':>8} {'repacked':>9} {'solo':>8} {'colocated':>10}"
        "   ($/h per unit of progress)"
    ]
    for r in doc["per_snapshot"]:
        rows.append(
            f"{r['day']:>6.2f} {r['jobs']:>5} {r['online']:>8.2f} {r['repacked']:>9.2f} "
            f"{r['solo']:>8.2f} {r['colocated']:>10.2f}"
        )
    on, re_ = doc["online_saving"], doc["repacked_saving"]
    rows.append(
        f"saving vs solo / colocated: online {on['solo']}x / {on['colocated']}x, "
        f"repacked {re_['solo']}x / {re_['colocated']}x; online over repacked "
        f"{doc['online_over_repacked']}x"
    )
    return _emit(args, doc, rows)


def _affinity(args: argparse.Namespace) -> int:
    from roll_agentic.sim.affinity import affinity_report

    doc = affinity_report()
    rows = [
        f"{'task':<12} {'routed to':>9} "
        + " ".join(f"{c + ' $/traj':>14}" for c in doc["affinity_vs_pool"])
    ]
    for task, row in doc["per_task"].items():
        costs = " ".join(f"{row[c]['cost_per_trajectory']:>14.6f}" for c in doc["affinity_vs_pool"])
        rows.append(f"{task:<12} {doc['routing'][task]:>9} {costs}")
    rows.append(
        f"affinity vs cheaper single pool ({doc['cheaper_single_pool']}): "
        f"{doc['affinity_vs_single_pool']}x; vs each: {doc['affinity_vs_pool']}"
    )
    return _emit(args, doc, rows)


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
    ) -> None:
        p.add_argument(
            "--jobs",
            type=at_most(min_jobs, max_jobs, jobs_why),
            default=jobs,
            help=f"number of jobs (default {jobs}, at most {max_jobs})",
        )
        p.add_argument("--seed", type=at_least(0), default=0, help="seed of the generated trace(s)")
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
            f"--rehome, which moves a job left alone on them; at most {MAX_SCALE_TRAIN})",
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

    p = sub.add_parser("compare", help="all policies on one trace")
    common(p, 200)
    p.add_argument("--trace", help="a trace JSON file (default: generate one from --jobs/--seed)")
    p.add_argument(
        "--arrival",
        choices=["poisson", "philly"],
        default="poisson",
        help="arrival process of a generated trace",
    )
    p.add_argument(
        "--slo",
        nargs=2,
        type=float,
        metavar=("LO", "HI"),
        help="draw a generated trace's SLOs (tolerated slowdowns) from U(LO, HI) instead of "
        "U(1, 2), the paper's: what looser or tighter SLOs buy",
    )
    p.add_argument("--save-trace", metavar="FILE", help="write the trace used to FILE as JSON")
    p.add_argument("--plot", metavar="DIR", help="write Gantt and cost-over-time PNGs to DIR")
    _replan_option(p)
    p.add_argument(
        "--seeds",
        type=_seed_ranges,
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
    p.set_defaults(func=_reporting_errors(_compare))

    p = sub.add_parser("optimality", help="RollMux vs brute-force optimum on small instances")
    # Instances draw 3 to --jobs jobs, each solved by exhaustive search: a limit of its own.
    common(p, 8, min_jobs=3, max_jobs=MAX_OPTIMALITY_JOBS, jobs_why=OPTIMALITY_JOBS_WHY)
    p.add_argument(
        "--instances",
        type=at_most(1, MAX_INSTANCES, INSTANCES_WHY),
        default=20,
        help=f"number of random instances (at most {MAX_INSTANCES})",
    )
    p.add_argument(
        "--budget",
        type=at_most(1, MAX_BUDGET, BUDGET_WHY),
        default=10_000,
        help="placements the search may try per instance (each one a memoised round-robin "
        "run); past it the optimum is the best found (reported as search_complete=false; "
        f"at most {MAX_BUDGET})",
    )
    p.add_argument(
        "--one-by-one",
        action="store_true",
        help="place the instance's jobs one at a time in arrival order (the paper's online "
        "rule) instead of as the batch they arrive in",
    )
    p.set_defaults(func=_reporting_errors(_optimality))

    p = sub.add_parser("scale", help="scheduler time to place a large trace")
    common(p, 2000, max_jobs=MAX_SCALE_JOBS, jobs_why=SCALE_JOBS_WHY)
    _replan_option(p)
    p.set_defaults(func=_reporting_errors(_scale))

    p = sub.add_parser(
        "repack", help="online RollMux vs the running jobs re-placed from scratch, at instants"
    )
    p.add_argument(
        "--jobs",
        type=at_most(1, MAX_JOBS, JOBS_WHY),
        default=200,
        help=f"number of jobs (default 200, at most {MAX_JOBS})",
    )
    p.add_argument("--seed", type=at_least(0), default=0, help="seed of the generated trace")
    p.add_argument("--trace", help="a trace JSON file (default: generate one from --jobs/--seed)")
    p.add_argument(
        "--snapshots",
        type=at_most(1, MAX_SNAPSHOTS, SNAPSHOTS_WHY),
        default=6,
        help=f"instants to compare at (default 6, at most {MAX_SNAPSHOTS})",
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
    p.set_defaults(func=_reporting_errors(_repack))

    p = sub.add_parser("affinity", help="task-affine pools vs a single GPU pool")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(func=_reporting_errors(_affinity))
    return sim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="roll-agentic")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sim", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
