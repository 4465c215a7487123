"""Experiments: policies side by side on one trace, optimality on small
instances, and scheduler time at scale. Every figure comes from a simulated
run; this module only arranges runs and divides.

cost_per_hour: a policy's total node cost (node-hours x price over the run)
divided by the same reference span for every policy: the solo run's span
from first arrival to last departure. Policies that slow jobs down keep
nodes longer and pay for it; dividing by each policy's own, longer span
would hide that.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from roll_agentic.mux.batch import apply_batch
from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.policy import SchedulerPolicy
from roll_agentic.mux.profile import ClusterSpec, Pool
from roll_agentic.sim.baselines import ColocatedPolicy, GreedyPolicy, RandomPolicy, SoloPolicy
from roll_agentic.sim.census import SLO_BANDS
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.doc_file import listed_problems
from roll_agentic.sim.optimal import ReplayPolicy, plan_objective, solve
from roll_agentic.sim.options import DEFAULT_OPTIONS, RollMuxOptions
from roll_agentic.sim.sim_result import SimResult
from roll_agentic.sim.trace import (
    Trace,
    TraceJob,
    WorkloadSpec,
    check_fits,
    generate_trace,
    trace_problems,
)

POLICIES = ("solo", "colocated", "random", "greedy", "rollmux")


def make_policy(
    name: str,
    spec: ClusterSpec,
    seed: int = 0,
    options: RollMuxOptions = DEFAULT_OPTIONS,
) -> SchedulerPolicy:
    if name == "solo":
        return SoloPolicy(spec)
    if name == "colocated":
        return ColocatedPolicy(spec)
    if name == "random":
        return RandomPolicy(spec, seed=seed)
    if name == "greedy":
        return GreedyPolicy(spec)
    if name == "rollmux":
        return options.policy(spec)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


def run_policies(
    trace: Trace,
    spec: ClusterSpec,
    names: tuple[str, ...] = POLICIES,
    record: bool = False,
    options: RollMuxOptions = DEFAULT_OPTIONS,
) -> dict[str, SimResult]:
    return {
        n: ClusterSimulator(
            spec,
            make_policy(n, spec, trace.seed, options),
            record_phases=record,
        ).run(trace.jobs)
        for n in names
    }


def summarize(results: dict[str, SimResult], spec: ClusterSpec) -> dict:
    ref = results.get("solo") or next(iter(results.values()))
    first = min(j.arrival for j in ref.jobs)
    ref_h = (ref.end_time - first) / 3600.0
    cost = {n: r.total_cost / ref_h for n, r in results.items()}
    out: dict = {
        "cost_per_hour": {n: round(c, 1) for n, c in cost.items()},
        "cost_per_hour_by_pool": {
            n: {p: round(c / ref_h, 1) for p, c in r.pool_cost().items()} for n, r in results.items()
        },
        "slo_attainment": {n: round(r.slo_attainment, 4) for n, r in results.items()},
        "utilization": {n: round(r.utilization(spec), 4) for n, r in results.items()},
        "utilization_by_pool": {
            n: {p: None if u is None else round(u, 4) for p, u in r.pool_utilization(spec).items()}
            for n, r in results.items()
        },
        "mean_slowdown": {
            n: round(float(np.mean([j.slowdown for j in r.jobs])), 4) for n, r in results.items()
        },
        "scheduler_time_s": {n: round(r.scheduler_time_s, 4) for n, r in results.items()},
        "regroup_time_s": {n: round(r.regroup_time_s, 4) for n, r in results.items() if r.moves},
        "moves": {n: r.moves for n, r in results.items() if r.moves},
        "replan_time_s": {n: round(r.replan_time_s, 4) for n, r in results.items() if r.replans},
        "replans": {n: r.replans for n, r in results.items() if r.replans},
        "reference_hours": round(ref_h, 2),
        # Shares of each policy's $: per group size, and groups of one per
        # their job's SLO band (`census.py`): what multiplexing reached.
        "cost_share_by_group_size": {n: _shares(r.cost_by_group_size, r) for n, r in results.items()},
        "alone_cost_share_by_slo": {
            n: _shares(r.alone_cost_by_slo, r, [label for _, label in SLO_BANDS])
            for n, r in results.items()
        },
    }
    if "solo" in results:
        # The floor for any disaggregated placement: the solo run's busy GPU
        # seconds (rollout on rollout-class, training on training-class GPUs,
        # switches excluded; with migration, a rollout's tail counts only the
        # stragglers' GPUs) at their prices. No packing can pay less than
        # the work itself, so solo / floor caps every policy's saving.
        floor = (
            sum(
                results["solo"].busy_gpu_s[p.value] / 3600.0 * spec.node_class(p).price_per_gpu_hour
                for p in Pool
            )
            / ref_h
        )
        out["work_floor_per_hour"] = round(floor, 1)
        out["max_saving_vs_solo"] = round(cost["solo"] / floor, 3)
    if "rollmux" in cost:
        out["rollmux_saving"] = {
            n: round(c / cost["rollmux"], 3) for n, c in cost.items() if n != "rollmux"
        }
    return out


def _shares(spent: dict[str, float], result: SimResult, keys: list[str] | None = None) -> dict[str, float]:
    """Each entry of `spent` as a share of the run's node cost, in the order of `keys` (zeros kept)."""
    total = result.total_cost
    keys = keys if keys is not None else sorted(spent)
    return {k: round(spent.get(k, 0.0) / total, 4) if total > 0 else 0.0 for k in keys}


def compare(
    trace: Trace,
    spec: ClusterSpec | None = None,
    record: bool = False,
    options: RollMuxOptions = DEFAULT_OPTIONS,
    migration: bool = True,
    rollout_fifo: bool = False,
):
    spec = spec or ClusterSpec(migration=migration, rollout_fifo=rollout_fifo)
    check_fits(trace, spec)
    results = run_policies(trace, spec, record=record, options=options)
    out = summarize(results, spec)
    out["migration"] = spec.migration
    out["rollout_fifo"] = spec.rollout_fifo
    out["rollout_shrink"] = spec.rollout_shrink
    out["cluster"] = cluster_summary(spec)
    out["rollmux_options"] = options.as_doc()
    out["jobs"] = len(trace.jobs)
    out["seed"] = trace.seed
    out["arrival"] = trace.workload.arrival
    # The range a generated trace drew its SLOs from; a CSV file's, as found in it.
    slos = [j.profile.slo for j in trace.jobs]
    if trace.workload.arrival == "file" and slos:
        out["slo_range"] = [min(slos), max(slos)]
    else:
        out["slo_range"] = list(trace.workload.slo_range)
    # Distinct trainer forms among the jobs (`JobProfile.form`; 0: every job any form).
    out["trainer_forms"] = len({j.profile.form for j in trace.jobs if j.profile.form})
    return out, results


def cluster_summary(spec: ClusterSpec) -> dict:
    """The hardware a run assumed (`--cluster`), for its JSON."""
    return {
        **{
            pool: {
                "name": c.name,
                "gpus_per_node": c.gpus_per_node,
                "price_per_gpu_hour": c.price_per_gpu_hour,
                "host_mem_gb": c.host_mem_gb,
            }
            for pool, c in (("rollout", spec.rollout), ("train", spec.train))
        },
        "warm_switch_s": round(spec.warm_switch_s, 4),
        "cold_switch_s": spec.cold_switch_s,
        "scale_efficiency": spec.scale_efficiency,
    }


def _instance(seed: int, n_jobs: int) -> list[TraceJob]:
    """Jobs that all start at t=0 and outlive the horizon (steady state)."""
    trace = generate_trace(seed, WorkloadSpec(n_jobs=n_jobs))
    return [replace(j, arrival_s=0.0, n_iters=100_000) for j in trace.jobs]


def _cost_per_work(result: SimResult) -> float:
    work_h = sum(j.solo_s for j in result.jobs) / 3600.0
    return result.total_cost / work_h


def optimality(
    instances: int = 20,
    max_jobs: int = 8,
    seed: int = 0,
    spec: ClusterSpec | None = None,
    node_budget: int = 10_000,
    options: RollMuxOptions = DEFAULT_OPTIONS,
    batch: bool = True,
    migration: bool = True,
    rollout_fifo: bool = False,
) -> dict:
    """RollMux versus the brute-force optimum on small static instances.

    Both placements run in the simulator for 40 of the longest solo
    iterations; the ratio is of simulated $ per hour of solo-equivalent work.
    Like for like: the search applies RollMux's own feasibility rules (the
    same round-robin SLO check with the same headroom, the same host-memory
    check) but not its heuristics (saturation pruning, the load and cycle
    screens, the three candidate kinds, arrival order): it is the optimum
    of the placement problem, not of RollMux's search space. `options.share_any`
    runs RollMux with candidates beyond the paper's three kinds. The jobs
    arrive together, so RollMux places them as a batch (`mux/batch.py`:
    it searches their order, and the order sets each group's round-robin
    order, which the search keeps as given); `batch=False` places them one
    by one in arrival order, as the paper's online rule does.

    `optimal_saving` is solo's and colocated's $ per unit of work over the
    optimum's on the same instances: what any placement of these jobs
    could save, the yardstick for `sim compare`'s savings.
    """
    spec = spec or ClusterSpec(migration=migration, rollout_fifo=rollout_fifo)
    rng = np.random.default_rng(seed)
    ratios: list[float] = []
    slo: list[float] = []
    planned: list[float] = []  # the same ratio on worst-case plans, before simulation
    rows = []
    baseline_over_opt: dict[str, list[float]] = {"solo": [], "colocated": []}
    complete = True
    # Every instance drawn (as before: one draw of `rng` each) and checked before any runs:
    # a job that fits no node of `spec` could run nowhere (`compare` refuses it too).
    drawn = [_instance(seed * 1000 + k, int(rng.integers(3, max_jobs + 1))) for k in range(instances)]
    problems = [f"instance {k}: {p}" for k, jobs in enumerate(drawn) for p in trace_problems(jobs, spec)]
    if problems:
        raise ValueError(listed_problems(problems))
    for jobs in drawn:
        n = len(jobs)
        horizon = 40.0 * max(j.profile.solo_iter_s for j in jobs)
        budget = RollMuxPolicy.batch_budget if batch else 0
        rm = ClusterSimulator(
            spec, options.policy(spec, batch_budget=budget), horizon_s=horizon
        ).run(jobs)
        book = GroupBook(spec)
        planner = RollMuxPolicy(spec, share_any=options.share_any, batch_budget=budget)
        apply_batch(book, planner.place_batch(book.groups, [j.profile for j in jobs]))
        # RollMux's own plan bounds the search from above: only better counts.
        rm_plan = plan_objective(book, spec)
        sol = solve([j.profile for j in jobs], spec, upper_bound=rm_plan, node_budget=node_budget)
        planned.append(rm_plan / sol.objective)
        complete = complete and sol.complete
        if sol.steps:
            opt = ClusterSimulator(spec, ReplayPolicy(spec, sol.steps), horizon_s=horizon).run(jobs)
        else:  # nothing beats RollMux's own plan: it is the optimum
            opt = rm
        ratio = _cost_per_work(rm) / _cost_per_work(opt)
        ratios.append(ratio)
        slo.append(rm.slo_attainment)
        # What any placement could save here: the baselines over the optimum.
        over = {
            name: _cost_per_work(
                ClusterSimulator(spec, make_policy(name, spec), horizon_s=horizon).run(jobs)
            )
            / _cost_per_work(opt)
            for name in ("solo", "colocated")
        }
        for name, v in over.items():
            baseline_over_opt[name].append(v)
        rows.append(
            {
                "jobs": n,
                "ratio": round(ratio, 4),
                "planned_ratio": round(planned[-1], 4),
                "solo_over_optimal": round(over["solo"], 4),
                "colocated_over_optimal": round(over["colocated"], 4),
                "rollmux_slo": rm.slo_attainment,
                "optimal_slo": opt.slo_attainment,
                "visited": sol.visited,
                "search_complete": sol.complete,
            }
        )
    return {
        "instances": instances,
        "max_jobs": max_jobs,
        "max_ratio_to_optimal": round(max(ratios), 4),
        "mean_ratio_to_optimal": round(float(np.mean(ratios)), 4),
        "max_planned_ratio_to_optimal": round(max(planned), 4),
        "mean_planned_ratio_to_optimal": round(float(np.mean(planned)), 4),
        "rollmux_slo_attainment": round(float(np.mean(slo)), 4),
        # The optimum's own saving over each baseline ($ per unit of work):
        # a ceiling for any placement on this workload's static instances.
        "optimal_saving": {
            name: {"mean": round(float(np.mean(v)), 4), "min": round(min(v), 4), "max": round(max(v), 4)}
            for name, v in baseline_over_opt.items()
        },
        "search_complete": complete,  # False: some optimum is only the best found
        "search_budget": node_budget,
        # A batch's plans run under both candidate sets (`mux/batch.py`).
        "rollmux_candidates": "share_any"
        if options.share_any
        else ("paper+share_any" if batch else "paper"),
        "rehome": options.rehome,
        "bank_slack": options.bank_slack,
        "batch": batch,
        "migration": spec.migration,
        "rollout_shrink": spec.rollout_shrink,
        "rollout_fifo": spec.rollout_fifo,
        "cluster": cluster_summary(spec),
        "per_instance": rows,
    }


def scale(
    n_jobs: int = 2000,
    seed: int = 0,
    spec: ClusterSpec | None = None,
    options: RollMuxOptions = DEFAULT_OPTIONS,
    migration: bool = True,
    rollout_fifo: bool = False,
) -> dict:
    """Scheduler CPU time to place every job of an `n_jobs` trace (RollMux), moves included."""
    spec = spec or ClusterSpec(migration=migration, rollout_fifo=rollout_fifo)
    wl = WorkloadSpec(n_jobs=n_jobs, span_days=14.0 * n_jobs / 200)
    trace = generate_trace(seed, wl)
    check_fits(trace, spec)  # as `compare` does: a job that fits no node could run nowhere
    t0 = time.perf_counter()
    result = ClusterSimulator(spec, options.policy(spec)).run(trace.jobs)
    # Offering lone jobs a move between iterations, and re-planning, are
    # scheduler work too: the total counts all, and each part is shown.
    total = result.scheduler_time_s + result.regroup_time_s + result.replan_time_s
    return {
        "jobs": n_jobs,
        f"scheduler_time_s_{n_jobs}_jobs": round(total, 4),
        "per_job_ms": round(1000 * total / n_jobs, 4),
        "placement_time_s": round(result.scheduler_time_s, 4),
        "regroup_time_s": round(result.regroup_time_s, 4),
        "replan_time_s": round(result.replan_time_s, 4),
        "moves": result.moves,
        "slo_attainment": round(result.slo_attainment, 4),
        "migration": spec.migration,
        "rollout_shrink": spec.rollout_shrink,
        "rollout_fifo": spec.rollout_fifo,
        "rollmux_options": options.as_doc(),
        "cluster": cluster_summary(spec),
        "simulation_wall_s": round(time.perf_counter() - t0, 2),
    }


def scale_table(doc: dict) -> list[str]:
    """`scale`'s figures as a reader takes them in: the total against the bar, then its parts."""
    n = doc["jobs"]
    total = doc[f"scheduler_time_s_{n}_jobs"]
    c = doc["cluster"]
    pools = " | ".join(
        f"{p['name']} x{p['gpus_per_node']}, {p['price_per_gpu_hour']:g} per GPU-hour, {p['host_mem_gb']:g} GB host"
        for p in (c["rollout"], c["train"])
    )
    return [
        f"{n:,} jobs placed by RollMux: {total:.3f} s of scheduler CPU in all, "
        f"{doc['per_job_ms']:.3f} ms per job (the paper: 591 ms for 2,000)",
        f"  placement on arrival  {doc['placement_time_s']:>8.3f} s",
        f"  between iterations    {doc['regroup_time_s']:>8.3f} s  ({doc['moves']} moves; trims and checks too)",
        f"  re-plans              {doc['replan_time_s']:>8.3f} s",
        f"SLO attainment {doc['slo_attainment']}; long-tail migration "
        f"{'on' if doc['migration'] else 'off'}; rollout nodes "
        f"{'first come, first served' if doc['rollout_fifo'] else 'in round-robin turns'}",
        f"cluster: {pools}; switches warm {c['warm_switch_s']:.3g} s, cold {c['cold_switch_s']:g} s",
        f"simulated in {doc['simulation_wall_s']} s of wall time",
    ]
