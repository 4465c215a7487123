"""The handlers of `roll-agentic sim`'s subcommands: each runs one command from its parsed flags.

`cli.py` builds the parser and points each subcommand at its handler here;
every handler prints a table, or with --json one JSON object as the last
line, and bad input (a malformed trace, a clash of flags) ends in one line
on stderr with exit status 2 (`reporting_errors`).
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

from roll_agentic.sim.options import RollMuxOptions
from roll_agentic.sim.trace import Trace, WorkloadSpec, generate_trace

if TYPE_CHECKING:
    from roll_agentic.mux.profile import ClusterSpec


def _generator_flags_unused(args: argparse.Namespace) -> None:
    """ValueError for the flags that shape a generated trace when a --trace file is given (they were dropped)."""
    if not args.trace:
        return
    given = [flag for flag, on in (("--seed", args.seed != 0), ("--jobs", args.jobs != 200),
                                   ("--arrival", getattr(args, "arrival", "poisson") != "poisson"),
                                   ("--forms", getattr(args, "forms", 0) != 0)) if on]
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


def reporting_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
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
        forms=args.forms,
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


def run_compare(args: argparse.Namespace) -> int:
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
            WorkloadSpec(n_jobs=args.jobs, arrival=args.arrival, slo_range=slo_range, forms=args.forms),
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
        # A file's trace has no seed the user could set (--seed is refused with --trace).
        f"{doc['jobs']} job{'s' if doc['jobs'] != 1 else ''}, " + (f"seed {doc['seed']}, " if doc["arrival"] != "file" else "")
        + f"{doc['arrival']} arrivals, "
        + (
            f"SLOs {lo:g}-{hi:g} (as in the file); "
            if doc["arrival"] == "file"
            else f"SLOs from U({lo:g}, {hi:g}); "
        )
        + (f"{doc['trainer_forms']} trainer forms (never in one group); " if doc["trainer_forms"] else "")
        + f"$/h over the solo span of {doc['reference_hours']} h; SLO met: share of jobs within their "
        "SLO; util: busy share of allocated GPU time; R, T: rollout, training nodes; slowdown: mean of "
        "each job's time from arrival to end over its time alone on its profiled nodes (below 1: "
        "faster); alone: share of $ on groups of one job"
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
    line = f"rollmux's $: {sizes.get('1', 0.0):.1%} on jobs alone in their group ({by_slo})"
    return f"{line}; groups of {by_size}" if by_size else f"{line}; no job shared a group"


def run_optimality(args: argparse.Namespace) -> int:
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
            + ("  *" if not r["search_complete"] else "")
        )
    rows.append(f"max ratio {doc['max_ratio_to_optimal']}, mean {doc['mean_ratio_to_optimal']}; ratios of $ per "
                "unit of work (a job at its solo speed does 1); the optimum is over disaggregated "
                "placements, so colocated/optimal may be below 1")
    cut = sum(not r["search_complete"] for r in doc["per_instance"])
    if cut:  # the JSON said so (search_complete), the table did not
        rows.append(f"* the search stopped at its budget ({doc['search_budget']:,} placements) on {cut} of "
                    f"{len(doc['per_instance'])} instances: there the optimum is the best found (--budget N)")
    saving = doc["optimal_saving"]
    rows.append(
        f"the optimum saves {saving['solo']['mean']}x over solo and "
        f"{saving['colocated']['mean']}x over colocated (mean per instance)"
    )
    return _emit(args, doc, rows)


def run_scale(args: argparse.Namespace) -> int:
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


def run_repack(args: argparse.Namespace) -> int:
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


def run_affinity(args: argparse.Namespace) -> int:
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
        f"{doc['affinity_vs_single_pool']}x; vs each: "
        + ", ".join(f"{c} only {r}x" for c, r in doc["affinity_vs_pool"].items())
        + " (single-pool $ per trajectory over affine; above 1: affine pools cheaper)"
    )
    return _emit(args, doc, rows)
