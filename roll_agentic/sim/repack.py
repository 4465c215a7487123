"""What churn costs online placement: the running jobs re-placed from scratch.

RollMux places each job when it arrives, into the groups that exist then;
jobs leave at their own times and the groups they leave behind are kept
(members left alone on their training nodes are offered moves). `sim
repack` measures what that costs against hindsight: at a few instants of a
trace it stops the RollMux run, and prices

- `online`: the groups the run holds at that instant;
- `repacked`: the same running jobs placed from scratch as one batch by
  RollMux's own batch search (`mux/batch.py`, the one that comes within
  1.05x of the brute-force optimum on small instances);
- `solo` and `colocated`: the same jobs under the two baselines.

Each is $/h per unit of progress (a job at its solo speed makes 1), on the
plans' typical phase lengths (`profile.planned`), so the figures compare
placements, not the luck of one run's phase lengths. A `repacked` well
below `online` is room a periodic re-plan (`replan.py`, `--replan HOURS`)
can win back, less the cold starts and the overlap of old and new nodes
that moving there costs (neither is counted here).
"""

from __future__ import annotations

import time

import numpy as np

from roll_agentic.mux.batch import GroupAssessor, apply_batch
from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool, phase_times, planned
from roll_agentic.sim.baselines import ColocatedPolicy, colocated_iter_s, colocated_nodes
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import Trace, check_fits


def colocated_per_progress(jobs: list[JobProfile], spec: ClusterSpec, headroom: float) -> float:
    """$/h per unit of progress of `jobs`, each alone on its co-located nodes."""
    cost = rate = 0.0
    for job in jobs:
        n = colocated_nodes(job, spec, headroom)
        t = planned(phase_times(job, 0, n, True, spec), job)
        cost += n * spec.price(Pool.TRAIN)
        rate += min(1.0, job.planned_iter_s / colocated_iter_s(t, spec))
    return cost / rate


def repack_report(
    trace: Trace, spec: ClusterSpec, snapshots: int = 6, share_any: bool = False
) -> dict:
    """Online RollMux vs the same running jobs re-placed as one batch, at `snapshots` instants.

    The instants are spread evenly over the middle 80 % of the arrival span
    (the cluster is filling up before and draining after). `share_any`:
    RollMux with candidates beyond the paper's three kinds, online and in
    the re-pack alike.
    """
    if snapshots < 1:
        raise ValueError(f"snapshots must be at least 1, got {snapshots}")
    check_fits(trace, spec)
    arrivals = [j.arrival_s for j in trace.jobs]
    first, last = min(arrivals), max(arrivals)
    # Distinct instants only: jobs that all arrive at once (one job, a batch) gave `snapshots`
    # copies of one instant, each run again and counted as another.
    instants = np.unique(np.linspace(first + 0.1 * (last - first), first + 0.9 * (last - first), snapshots))
    assessor = GroupAssessor(spec, SLO_HEADROOM)
    rows = []
    for t in instants:
        sim = ClusterSimulator(spec, RollMuxPolicy(spec, share_any=share_any), horizon_s=float(t))
        sim.run(trace.jobs)
        groups = sim.groups
        running = [p for g in groups.values() for p in g.members.values()]
        if not running:
            continue
        online = assessor.objective(groups.values())
        book = GroupBook(spec)
        t0 = time.process_time()
        planner = RollMuxPolicy(spec, share_any=share_any)
        apply_batch(book, planner.place_batch(book.groups, running))
        search_s = time.process_time() - t0
        repacked = assessor.objective(book.groups.values())
        solo = sum(p.solo_cost_per_hour(spec) for p in running) / len(running)
        colocated = colocated_per_progress(running, spec, ColocatedPolicy(spec).headroom)
        rows.append(
            {
                "day": round(float(t) / 86400.0, 2),
                "jobs": len(running),
                "online": round(online, 3),
                "repacked": round(repacked, 3),
                "solo": round(solo, 3),
                "colocated": round(colocated, 3),
                "search_cpu_s": round(search_s, 3),
            }
        )
    if not rows:
        raise ValueError("no job was running at any snapshot: the trace is empty or too short")

    def mean_ratio(num: str, den: str) -> float:
        return round(float(np.mean([r[num] / r[den] for r in rows])), 4)

    return {
        "snapshots": len(rows),
        "online_saving": {"solo": mean_ratio("solo", "online"), "colocated": mean_ratio("colocated", "online")},
        "repacked_saving": {
            "solo": mean_ratio("solo", "repacked"),
            "colocated": mean_ratio("colocated", "repacked"),
        },
        "online_over_repacked": mean_ratio("online", "repacked"),
        "migration": spec.migration,
        "rollout_shrink": spec.rollout_shrink,
        "rollout_fifo": spec.rollout_fifo,
        "share_any": share_any,
        "jobs": len(trace.jobs),
        "seed": trace.seed,
        "per_snapshot": rows,
    }
