"""mux_summary.json and mux_gantt.png: a multiplexed pass against the same jobs run alone.

A pass is what `Multiplexer.result()` returns: each job's record (step end
times, switches, profile) and every interval a node was held. The solo pass
runs the same jobs one after the other through the same code, alone on the
pools, so busy fractions and iteration times compare like for like.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import matplotlib

from roll_agentic.mux.job_state import DEFAULT_FIRST_ADMITTED_END, iteration_times

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _iteration_s(job: dict) -> float | None:
    # From the job's first admitted step, as `mux status` counts (a pass recorded before
    # the record had the index: its probe took the default 2 steps).
    its = iteration_times(job["step_ends"], job.get("first_admitted_end", DEFAULT_FIRST_ADMITTED_END))
    return statistics.fmean(its) if its else None


def _rewards(run_dir: str) -> list[float]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        vals = [v for k, v in row.items() if k.startswith("reward/") and k.endswith("/mean") and v is not None]
        if vals:
            out.append(statistics.fmean(vals))
    return out


def learning(run_dir: str, k: int = 3) -> dict[str, float | None]:
    """Mean reward (over tasks) of the first and last k steps."""
    r = _rewards(run_dir)
    if not r:
        return {"first": None, "last": None}
    return {"first": statistics.fmean(r[:k]), "last": statistics.fmean(r[-k:])}


def build_summary(mux: dict, solo: dict | None) -> dict:
    jobs = mux["jobs"]
    out: dict = {
        "pool_busy_fraction": mux["pool_busy_fraction"],
        "solo_pool_busy_fraction": solo["pool_busy_fraction"] if solo else None,
        "job_slo": {n: j["slo"] for n, j in jobs.items()},
        "job_state": {n: j["state"] for n, j in jobs.items()},
        "warm_switch_s": {n: j["warm_switch_s"] for n, j in jobs.items()},
        "cold_switch_s": {n: j["cold_switch_s"] for n, j in jobs.items()},
        "wall_s": {"mux": mux["end"] - mux["start"], "solo": (solo["end"] - solo["start"]) if solo else None},
    }
    out["warm_vs_cold_speedup"] = {n: (out["cold_switch_s"][n] / out["warm_switch_s"][n])
                                   if out["cold_switch_s"][n] and out["warm_switch_s"][n] else None for n in jobs}
    it = {n: {"mux": _iteration_s(j), "solo": _iteration_s(solo["jobs"][n]) if solo and n in solo["jobs"] else None,
              "profiled_solo": j["profile"].get("solo_iter_s")} for n, j in jobs.items()}
    out["job_iteration_s"] = it
    # Against the solo pass where there is one; else (`--no-solo`) against the profiled
    # solo iteration, the figure `mux status` shows: before, a run without the solo pass
    # reported every slowdown as null and every SLO as missed.
    out["job_slowdown_basis"] = {n: "solo pass" if v["solo"] else "profile" if v["profiled_solo"] else None
                                 for n, v in it.items()}
    out["job_slowdown"] = {n: (v["mux"] / (v["solo"] or v["profiled_solo"]))
                           if v["mux"] and (v["solo"] or v["profiled_solo"]) else None for n, v in it.items()}
    # None where no slowdown could be measured (a job that failed early): unknown, not missed.
    out["job_slo_met"] = {n: None if s is None else s <= out["job_slo"][n] for n, s in out["job_slowdown"].items()}
    if solo:
        out["busy_ratio"] = {p: f / solo["pool_busy_fraction"][p] if solo["pool_busy_fraction"].get(p) else None
                             for p, f in mux["pool_busy_fraction"].items()}
    out["learning"] = {n: {"mux": learning(j["run_dir"]),
                           "solo": learning(solo["jobs"][n]["run_dir"]) if solo and n in solo["jobs"] else None}
                       for n, j in jobs.items()}
    return out


def _plot_pass(ax, result: dict, title: str, colors: dict[str, str]) -> None:
    nodes = sorted({i["node"] for i in result["intervals"]})
    t0 = result["start"]
    for row, node in enumerate(nodes):
        for i in result["intervals"]:
            if i["node"] != node:
                continue
            ax.barh(row, i["end"] - i["start"], left=i["start"] - t0, color=colors[i["job"]],
                    hatch="//" if i["kind"].startswith("probe") else None, edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_title(f"{title}: busy " + ", ".join(f"{p} {f:.0%}" for p, f in result["pool_busy_fraction"].items()))
    ax.set_xlabel("seconds")


def write_gantt(mux: dict, solo: dict | None, out: Path) -> Path:
    jobs = sorted(set(mux["jobs"]) | set(solo["jobs"] if solo else []))
    palette = plt.get_cmap("tab10")
    colors = {j: palette(i % 10) for i, j in enumerate(jobs)}
    passes = [(mux, "multiplexed")] + ([(solo, "one after the other, alone")] if solo else [])
    fig, axes = plt.subplots(len(passes), 1, figsize=(11, 2.2 + 1.6 * len(passes)), squeeze=False, sharex=True)
    for ax, (res, title) in zip(axes[:, 0], passes, strict=True):
        _plot_pass(ax, res, title, colors)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[j]) for j in jobs]
    fig.legend(handles, jobs, loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


PASSES_FILE = "mux_passes.json"


def earlier_passes(run_dir: Path) -> dict:
    """The passes an earlier session of this run recorded (a resume's run folder); {} if none."""
    try:
        doc = json.loads((run_dir / PASSES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_summary(run_dir: Path, mux: dict, solo: dict | None, earlier: dict | None = None) -> dict:
    """The summary of pass `mux` against `solo`, written with the passes and the Gantt chart.

    `earlier`: what an earlier session of this run recorded (`earlier_passes`): its
    multiplexed passes are kept in the passes file, under `mux_before_resume`
    (a resumed session's summary covers its own pass only; the first one's was lost)."""
    summary = build_summary(mux, solo)
    (run_dir / "mux_summary.json").write_text(json.dumps(summary, indent=2))
    passes: dict = {"mux": mux, "solo": solo}
    if earlier:
        before = list(earlier.get("mux_before_resume") or [])
        passes["mux_before_resume"] = before + ([earlier["mux"]] if earlier.get("mux") else [])
    (run_dir / PASSES_FILE).write_text(json.dumps(passes, indent=1))
    write_gantt(mux, solo, run_dir / "mux_gantt.png")
    return summary
