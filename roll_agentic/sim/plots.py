"""PNG plots of a simulated run: phases per node (Gantt), cost over time, and each
job's slowdown against its SLO."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on cluster or CI machines
import matplotlib.pyplot as plt  # noqa: E402

from roll_agentic.sim.sim_result import SimResult  # noqa: E402


def gantt(result: SimResult, path: Path, max_nodes: int = 40, window_h: float = 12.0) -> None:
    """Phases on the first `max_nodes` nodes over the first `window_h` hours of the run (from
    its first phase: a trace whose jobs arrive at hour 100 drew no bars in hours 0-12)."""
    t0 = min((p.start for p in result.phases), default=0.0)
    phases = [p for p in result.phases if p.start < t0 + window_h * 3600.0]
    nodes = sorted({p.node_id for p in phases})[:max_nodes]
    row = {nid: i for i, nid in enumerate(nodes)}
    jobs = sorted({p.job_id for p in phases})
    cmap = plt.get_cmap("tab20")
    color = {j: cmap(i % 20) for i, j in enumerate(jobs)}
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.25 * len(nodes))))
    for p in phases:
        if p.node_id not in row:
            continue
        ax.barh(
            row[p.node_id],
            (p.end - p.start) / 3600.0,
            left=p.start / 3600.0,
            color=color[p.job_id],
            hatch="//" if p.kind == "train" else None,
            edgecolor="black",
            linewidth=0.2,
        )
    pool = {p.node_id: p.pool for p in phases}
    ax.set_yticks(range(len(nodes)), [f"{pool[n][0].upper()}{n}" for n in nodes], fontsize=6)
    ax.set_xlabel(
        "hours (hatched = training, plain = rollout until migration hands the node on; "
        "colour = job)"
    )
    shown = f"the first {window_h:g} h" + (f" and {len(nodes)} nodes" if len(nodes) == max_nodes else "")
    ax.set_title(f"{result.policy}: phases per node (R = rollout node, T = training node), {shown} of the run")
    if len(jobs) <= 20:  # tab20's colours are distinct up to 20: name each job
        from matplotlib.patches import Patch

        handles = [Patch(facecolor=color[j], edgecolor="black", linewidth=0.2, label=j) for j in jobs]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_over_time(results: dict[str, SimResult], path: Path) -> None:
    """Allocated $/h of each policy as a step function of time."""
    fig, ax = plt.subplots(figsize=(10, 4))
    for name, r in results.items():
        deltas: list[tuple[float, float]] = []
        for a in r.allocations:
            deltas += [(a.opened, a.price_per_hour), (a.closed, -a.price_per_hour)]
        deltas.sort()
        t, level, xs, ys = 0.0, 0.0, [0.0], [0.0]
        for t, d in deltas:
            xs.append(t / 3600.0)
            ys.append(level)
            level += d
            xs.append(t / 3600.0)
            ys.append(level)
        ax.plot(xs, ys, label=name, linewidth=1)
    ax.set_xlabel("hours")
    ax.set_ylabel("allocated $/h")
    ax.set_title("cluster cost over time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def slowdown_vs_slo(results: dict[str, SimResult], path: Path) -> None:
    """Each job's slowdown (time from arrival to its last iteration over the same
    iterations run alone) against its SLO, a panel per policy: above the
    diagonal, a job missed its SLO."""
    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results), 3.4), squeeze=False)
    jobs = [j for r in results.values() for j in r.jobs]
    lo, hi = min((j.slo for j in jobs), default=1.0), max((j.slo for j in jobs), default=2.0)
    # Far misses would squash the rest: the axis stops at 3x the loosest SLO.
    cap = 3.0 * hi
    top = min(cap, max((j.slowdown for j in jobs), default=hi))
    for ax, (name, r) in zip(axes[0], results.items(), strict=True):
        met = [j for j in r.jobs if j.attained]
        missed = [j for j in r.jobs if not j.attained]
        ax.scatter([j.slo for j in met], [j.slowdown for j in met], s=6, color="tab:blue", label="met")
        ax.scatter(
            [j.slo for j in missed], [j.slowdown for j in missed], s=6, color="tab:red", label="missed"
        )
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)  # slowdown = SLO
        ax.set_ylim(0.95, max(hi, top) * 1.03)
        off = sum(j.slowdown > cap for j in r.jobs)
        note = f", {off} above {cap:g}x" if off else ""
        ax.set_title(f"{name}: {len(met)}/{len(r.jobs)} met{note}", fontsize=9)
        ax.set_xlabel("SLO (tolerated slowdown)")
    axes[0][0].set_ylabel("slowdown")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(results: dict[str, SimResult], out_dir: str | Path) -> list[str]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, r in results.items():
        if r.phases:
            gantt(r, out / f"gantt_{name}.png")
            written.append(str(out / f"gantt_{name}.png"))
    cost_over_time(results, out / "cost_over_time.png")
    written.append(str(out / "cost_over_time.png"))
    slowdown_vs_slo(results, out / "slowdown_vs_slo.png")
    written.append(str(out / "slowdown_vs_slo.png"))
    return written
