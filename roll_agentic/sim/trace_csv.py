"""An operator's own jobs as a trace: one CSV row per job, checked line by line.

`sim compare --trace jobs.csv` (and `sim repack`) read it; `--save-trace
FILE` writes the JSON trace it became. Columns (a header row names them, in
any order):

required
  arrival_h      hours from the trace's start to the job's arrival, >= 0
  params_b       model size in billions of parameters (host memory, weight sync)
  rollout_nodes  rollout nodes the job was profiled on (the cluster's: 8 GPUs each unless --cluster says)
  train_nodes    training nodes the job was profiled on (the same)
  rollout_s      worst-case rollout seconds on those nodes (every response at the cap)
  train_s        worst-case training seconds on those nodes
  slo            tolerated slowdown versus running alone, >= 1
  run_h          hours the job runs alone (its length; rounded to whole iterations, at least one)

optional (default: what the generated traces assume, `trace.py`)
  job_id           unique name (default j0000, j0001, ... by row)
  form             its trainer form, any text (a LoRA shape and base, "full"): jobs of
                   different forms never share a group (default empty: any form)
  sync_s           weight sync over the inter-pool link (2 bytes/param at 5 GB/s + 5 s)
  train_mem_gb     host memory per training node (16 bytes/param over the training nodes)
  rollout_mem_gb   host memory per rollout node (2 bytes/param)
  tail_hold        share of a rollout its nodes are held, with long-tail migration
                   (the lognormal tail model, sigma 1.1, 1,024 responses)
  rollout_tp       GPUs per inference engine, for that model (1, 2, 4 by size)
  colo_roll_speed  a training GPU's rollout speed over a rollout GPU's (1.0)
  roll_typical     typical rollout length over the worst case (the trace model's mean)
  train_typical    typical training length over the worst case (the trace model's mean)

Every problem of every line is reported at once, with its line number.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from roll_agentic.mux.migration import tail_hold
from roll_agentic.mux.profile import FIELD_RANGES, JobProfile, out_of_range, profile_problems
from roll_agentic.sim.doc_file import listed_problems
from roll_agentic.sim.trace import (
    MAX_ARRIVAL_H,
    MAX_ITERATIONS,
    MAX_NODES,
    ROLLOUT_TP,
    Trace,
    TraceJob,
    WorkloadSpec,
    typical_fractions,
)

REQUIRED = (
    "arrival_h", "params_b", "rollout_nodes", "train_nodes", "rollout_s", "train_s", "slo", "run_h",
)
OPTIONAL = (
    "job_id", "form", "sync_s", "train_mem_gb", "rollout_mem_gb", "tail_hold", "rollout_tp",
    "colo_roll_speed", "roll_typical", "train_typical",
)
_TEXT = 2  # OPTIONAL's first columns are text, the others numbers
_INTEGERS = {"rollout_nodes", "train_nodes", "rollout_tp"}
_INF = math.inf
# Each column's range: the profile field's where it becomes one (`FIELD_RANGES`).
_PROFILE_FIELD = {"rollout_s": "roll_s"}
_RULES: dict[str, tuple[float, float, bool, str]] = {
    "arrival_h": (0.0, MAX_ARRIVAL_H, True, f"hours since the trace's start, 0 to {MAX_ARRIVAL_H:.0f} (ten years)"),
    "params_b": (0.0, _INF, False, "billions of parameters, > 0"),
    "rollout_nodes": (1.0, MAX_NODES, True, f"a whole number of nodes from 1 to {MAX_NODES}"),
    "train_nodes": (1.0, MAX_NODES, True, f"a whole number of nodes from 1 to {MAX_NODES}"),
    "run_h": (0.0, _INF, False, "hours the job runs alone, > 0"),
    "rollout_tp": (1.0, 8.0, True, "GPUs per inference engine, 1 to 8"),
}
for _column in REQUIRED + OPTIONAL:
    _field = _PROFILE_FIELD.get(_column, _column)
    if _field in FIELD_RANGES:
        _RULES[_column] = FIELD_RANGES[_field]


def _size(params_b: float) -> str:
    """The generated traces' size label of a model of `params_b` billions (sets its default TP)."""
    return "small" if params_b < 10 else "medium" if params_b < 20 else "large"


def _kind(roll_s: float, train_s: float) -> str:
    rho = roll_s / (roll_s + train_s)
    return "rollout_heavy" if rho > 0.6 else "train_heavy" if rho < 0.4 else "balanced"


def _parse(row: dict[str, str], wanted: tuple[str, ...]) -> tuple[dict[str, float], list[str]]:
    values, problems = {}, []
    for name in wanted:
        text = (row.get(name) or "").strip()
        if not text:
            if name in REQUIRED:
                problems.append(f"{name} is empty")
            continue
        try:
            value = float(text)
        except ValueError:
            problems.append(f"{name} must be a number, got {text!r}")
            continue
        if name in _INTEGERS and math.isfinite(value) and value != int(value):
            problems.append(f"{name} must be a whole number, got {text!r}")
        elif problem := out_of_range(name, value, _RULES[name]):
            problems.append(problem.replace(f"got {value!r}", f"got {text!r}"))
        else:
            values[name] = int(value) if name in _INTEGERS else value
    return values, problems


def _job(v: dict[str, float], job_id: str, form: str, seed: int, wl: WorkloadSpec) -> tuple[TraceJob | None, list[str]]:
    """One row's job (every column already in range), or the problems that stop it."""
    tp = v.get("rollout_tp", ROLLOUT_TP[_size(v["params_b"])])
    params, n_r, n_t = v["params_b"], v["rollout_nodes"], v["train_nodes"]
    sync = v.get("sync_s", 2.0 * params / wl.link_gb_s + wl.sync_fixed_s)
    roll_typical, train_typical = typical_fractions()
    hold = v.get("tail_hold")
    if hold is None:
        hold = tail_hold(8 * n_r, tp, sigma=1.1, n_responses=wl.responses_per_step, seed=seed)
    profile = JobProfile(
        job_id=job_id,
        kind=_kind(v["rollout_s"], v["train_s"]),
        size=_size(params),
        n_rollout=n_r,
        n_train=n_t,
        roll_s=v["rollout_s"],
        train_s=v["train_s"],
        sync_s=round(sync, 1),
        local_sync_s=round(sync / 4.0, 1),
        train_mem_gb=v.get("train_mem_gb", 16.0 * params / n_t),
        rollout_mem_gb=v.get("rollout_mem_gb", 2.0 * params),
        slo=v["slo"],
        colo_roll_speed=v.get("colo_roll_speed", 1.0),
        roll_typical=v.get("roll_typical", round(roll_typical, 4)),
        train_typical=v.get("train_typical", round(train_typical, 4)),
        tail_hold=round(hold, 4),
        form=form,
    )
    problems = profile_problems(profile)
    if problems:
        return None, problems
    n_iters = round(v["run_h"] * 3600.0 / profile.solo_iter_s)
    if n_iters < 1:  # it was raised to two iterations, silently
        return None, [f"run_h must cover at least one iteration alone ({profile.solo_iter_s / 3600.0:.2g} h: "
                      f"{profile.solo_iter_s:.0f} s), got {v['run_h']:g}"]
    if n_iters > MAX_ITERATIONS:
        return None, [f"run_h is {n_iters} iterations of {profile.solo_iter_s:.0f} s alone; "
                      f"at most {MAX_ITERATIONS} per job are simulated"]
    return TraceJob(v["arrival_h"] * 3600.0, int(n_iters), seed, profile), []


def trace_from_csv(path: str | Path, seed: int = 0) -> Trace:
    """The jobs of a CSV file as a trace; ValueError listing every problem, by line."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # -sig: Excel's "CSV UTF-8" marks its start
            reader = csv.DictReader(f)
            header = [h.strip() for h in reader.fieldnames or []]
            reader.fieldnames = header
            # Each row with its line in the file: blank lines, which the reader skips, count too.
            numbered = [(reader.line_num, row) for row in reader]
    except OSError as err:
        raise ValueError(f"cannot read trace {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"trace {path} is not UTF-8 text: save it as CSV UTF-8") from None
    except csv.Error as err:
        raise ValueError(f"trace {path} is not CSV: {err}") from None
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # csv.DictReader keeps the last copy's values, silently
        raise ValueError(f"trace {path}: the header names {', '.join(twice)} more than once; "
                         "keep one of each")
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        if len(header) == 1 and any(sep in header[0] for sep in ";\t"):
            raise ValueError(f"trace {path}: its header is one column, {header[0]!r}: separate the "
                             "columns with commas (a spreadsheet's 'CSV (comma delimited)')")
        what = []
        if missing:
            what.append(f"missing column(s) {', '.join(missing)}")
        if unknown:
            what.append(f"unknown column(s) {', '.join(unknown)}")
        raise ValueError(
            f"trace {path}: {'; '.join(what)}. Required: {', '.join(REQUIRED)}; "
            f"optional: {', '.join(OPTIONAL)}"
        )
    if not numbered:
        raise ValueError(f"trace {path}: no jobs below the header")
    wl = WorkloadSpec(n_jobs=len(numbered), arrival="file")
    rng = np.random.default_rng(seed)
    jobs: list[TraceJob] = []
    problems: list[str] = []
    seen: set[str] = set()
    lines: dict[str, int] = {}
    for i, (line, row) in enumerate(numbered):
        job_id = (row.get("job_id") or "").strip() or f"j{i:04d}"
        job_seed = int(rng.integers(2**31))
        where = f"line {line} ({job_id})"
        if None in row:  # more fields than the header names
            problems.append(f"{where}: more fields than the header has columns")
            continue
        if job_id in seen:
            problems.append(f"{where}: job_id repeats an earlier line's; ids must be unique")
        seen.add(job_id)
        lines[job_id] = line
        values, bad = _parse(row, REQUIRED + OPTIONAL[_TEXT:])
        if not bad:
            job, bad = _job(values, job_id, (row.get("form") or "").strip(), job_seed, wl)
            if job is not None:
                jobs.append(job)
        problems += [f"{where}: {p}" for p in bad]
    if problems:
        raise ValueError(f"trace {path}: {listed_problems(problems)}")
    jobs.sort(key=lambda j: j.arrival_s)
    span_days = max(j.arrival_s for j in jobs) / 86400.0
    return Trace(seed, WorkloadSpec(n_jobs=len(jobs), span_days=span_days, arrival="file"), jobs, lines, str(path))
