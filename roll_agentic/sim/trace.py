"""Job traces: arrivals, profiles, lengths, SLOs; generated from a seed, saved as JSON.

Workload model (assumptions, chosen to resemble the RollMux trace of 3B-32B
jobs with 4k-32k max lengths):
- Three sizes. small: 7B on 1 rollout + 1 training node; medium: 14B on
  2 + 1; large: 32B on 4 + 2. Host state per training node is 16 bytes per
  parameter (bf16 weights and grads, fp32 master and Adam moments) split over
  the job's training nodes; per rollout node, 2 bytes per parameter.
- Three kinds by the rollout share rho of a worst-case iteration:
  balanced rho ~ U(0.42, 0.58), rollout-heavy U(0.62, 0.80), train-heavy
  U(0.20, 0.38). The worst-case iteration length L ~ U(l_min, l_max) s.
- Weight sync moves bf16 weights over the slow inter-pool link
  (`link_gb_s`) plus a fixed handshake; local resharding is faster.
- SLO ~ U(1, 2). A job's length is its solo running time ~ U(h_min, h_max)
  hours, rounded to whole iterations.
- Long tails (for migration): a step's 1,024 responses have lognormal
  lengths with sigma ~ U(1.0, 1.2), so the longest is 25-32x the median
  (RollPacker's measurement); `mux.migration.tail_hold` turns that into
  the share of the rollout its GPUs are held (~0.32), with tensor-parallel
  groups of 1, 2 and 4 GPUs for the three sizes. Drawn from a stream of
  their own: the other fields are those of traces made before.
- Arrivals: Poisson over `span_days`, or Philly-like bursts (gamma
  inter-arrival times with shape 0.25: same mean rate, clumped).
- Per-iteration phase-length factors are drawn by the simulator from each
  job's own seed, so every policy sees the same durations: rollout
  min(1, lognormal(ln 0.85, 0.12)) of the worst case (the longest response
  usually sits near the length cap: long-tailed), training U(0.85, 1)
  (scales with generated tokens). Their means go into each profile as the
  typical phase lengths, as profiling a few iterations would measure them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from roll_agentic.mux.migration import tail_hold
from roll_agentic.mux.profile import ClusterSpec, JobProfile, profile_problems
from roll_agentic.sim.doc_file import listed_problems, read_doc

SIZES = {  # name: (params in billions, rollout nodes, training nodes)
    "small": (7.0, 1, 1),
    "medium": (14.0, 2, 1),
    "large": (32.0, 4, 2),
}
ROLLOUT_TP = {"small": 1, "medium": 2, "large": 4}  # GPUs per inference engine
KINDS = {  # name: range of the rollout share of a worst-case iteration
    "balanced": (0.42, 0.58),
    "rollout_heavy": (0.62, 0.80),
    "train_heavy": (0.20, 0.38),
}
# Per-iteration phase length as a fraction of the worst case.
ROLL_FACTOR_MEDIAN, ROLL_FACTOR_SIGMA = 0.85, 0.12  # min(1, lognormal)
TRAIN_FACTOR_RANGE = (0.85, 1.0)  # uniform


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def typical_fractions() -> tuple[float, float]:
    """Mean (rollout, train) length factors: E[min(1, X)] for the lognormal X."""
    mu, sigma = math.log(ROLL_FACTOR_MEDIAN), ROLL_FACTOR_SIGMA
    below = math.exp(mu + sigma**2 / 2.0) * _phi((-mu - sigma**2) / sigma)
    roll = below + _phi(mu / sigma)  # the part of X < 1, plus P(X >= 1) x 1
    return roll, sum(TRAIN_FACTOR_RANGE) / 2.0


# What one simulated run can hold: a job's per-iteration draws are arrays of its
# iteration count (a 1e9-hour job took 24 GB before the kernel killed it), and
# arrivals decades out make every $/h a rounding error.
MAX_ITERATIONS = 100_000
MAX_ARRIVAL_H = 87_600.0  # ten years
# Nodes of one pool a job was profiled on (8,192 GPUs of 8-GPU nodes): every
# phase walks its job's nodes, so 1,000 rollout nodes took 17 s for a single
# job, 10,000 ran past minutes, and a typo of 1000000 never finished.
MAX_NODES = 1024
# Jobs of one trace file (`--trace`): `sim compare --jobs`'s own limit (`cli_limits.MAX_JOBS`
# is this). Every job of a trace is simulated under every policy, and the more of them run
# at once the more each placement weighs (2,000 jobs over 14 days: 8 min); a file of
# millions of jobs ran for hours before a word.
MAX_TRACE_JOBS = 5_000


@dataclass(frozen=True)
class TraceJob:
    arrival_s: float
    n_iters: int
    seed: int  # seeds this job's per-iteration phase lengths
    profile: JobProfile


@dataclass(frozen=True)
class WorkloadSpec:
    n_jobs: int = 200
    span_days: float = 14.0
    arrival: str = "poisson"  # "poisson" | "philly"
    l_min_s: float = 1200.0
    l_max_s: float = 2400.0
    h_min: float = 24.0
    h_max: float = 120.0
    link_gb_s: float = 5.0
    sync_fixed_s: float = 5.0
    size_weights: tuple[float, float, float] = (0.4, 0.35, 0.25)
    kind_weights: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)
    slo_range: tuple[float, float] = (1.0, 2.0)
    tail_sigma_range: tuple[float, float] = (1.0, 1.2)
    responses_per_step: int = 1024
    # Base models per model size the jobs are spread over, each a trainer form
    # (`JobProfile.form`: jobs of different forms never share a group); 0: one, any.
    forms: int = 0


@dataclass
class Trace:
    seed: int
    workload: WorkloadSpec
    jobs: list[TraceJob] = field(default_factory=list)
    # job_id -> its line in the CSV file it came from (`trace_csv`): problems found
    # later (a job that fits no node) name the line, as the CSV's own checks do.
    csv_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    source: str = field(default="", compare=False, repr=False)  # the file it was read from, if any

    def save(self, path: str | Path) -> None:
        doc = {
            "version": 1,
            "seed": self.seed,
            "workload": asdict(self.workload),
            "jobs": [
                {
                    "arrival_s": j.arrival_s,
                    "n_iters": j.n_iters,
                    "seed": j.seed,
                    "profile": asdict(j.profile),
                }
                for j in self.jobs
            ],
        }
        Path(path).write_text(json.dumps(doc, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace written by `save` (or a CSV of jobs, `trace_csv.py`); ValueError on what is wrong."""
        if str(path).lower().endswith(".csv"):
            from roll_agentic.sim.trace_csv import trace_from_csv

            trace = trace_from_csv(path)
            _check_job_count(path, len(trace.jobs))
            return trace
        doc = read_doc(path, "trace", json.loads, json.JSONDecodeError, "JSON")
        if not isinstance(doc, dict) or not {"seed", "workload", "jobs"} <= doc.keys():
            raise ValueError(
                f"trace {path}: expected an object with 'seed', 'workload' and 'jobs' "
                "(`roll-agentic sim compare --save-trace FILE` writes one)"
            )
        if not _whole(doc["seed"]):
            raise ValueError(f"trace {path}: 'seed' must be a whole number >= 0, got {doc['seed']!r}")
        if not isinstance(doc["workload"], dict):
            raise ValueError(f"trace {path}: 'workload' must be an object, got {doc['workload']!r}")
        if not isinstance(doc["jobs"], list) or not doc["jobs"]:
            raise ValueError(f"trace {path}: 'jobs' must be a non-empty list of jobs, got {doc['jobs']!r}")
        _check_job_count(path, len(doc["jobs"]))  # before each job is read and checked
        wl = dict(doc["workload"])
        try:
            for key in ("size_weights", "kind_weights", "slo_range", "tail_sigma_range"):
                if key in wl:
                    wl[key] = tuple(wl[key])
            workload = WorkloadSpec(**wl)
        except TypeError as err:
            raise ValueError(f"trace {path}: bad 'workload': {err}") from None
        # The report prints both (`compare`): checked here, not after the whole run.
        if not _slo_pair(workload.slo_range):
            raise ValueError(f"trace {path}: workload.slo_range must be two numbers LO <= HI, "
                             f"got {doc['workload'].get('slo_range')!r}")
        if not isinstance(workload.arrival, str):
            raise ValueError(f"trace {path}: workload.arrival must be a string, got {workload.arrival!r}")
        # Every job's problems at once (one per run made a long file a game of whack-a-mole).
        jobs, numbers, problems = [], [], []
        for i, j in enumerate(doc["jobs"]):
            job, bad = _json_job(j)
            name = f"job #{i}"
            if isinstance(j, dict) and isinstance(j.get("profile"), dict) and isinstance(j["profile"].get("job_id"), str):
                name += f" ({j['profile']['job_id']})"
            problems += [f"{name}{p}" for p in bad]
            if job is not None:
                jobs.append(job)
                numbers.append(i)
        problems += trace_problems(jobs, numbers=numbers)
        if problems:
            raise ValueError(f"trace {path}: " + listed_problems(problems))
        return cls(doc["seed"], workload, jobs, source=str(path))


def _json_job(j: object) -> tuple[TraceJob | None, list[str]]:
    """One job of a JSON trace, or its problems (each ": ..." or " has no ...", after its name)."""
    if not isinstance(j, dict):
        return None, [f" must be an object with arrival_s, n_iters, seed and profile, got {j!r}"]
    missing = [k for k in ("arrival_s", "n_iters", "seed", "profile") if k not in j]
    if missing:
        return None, [f" has no {', '.join(repr(k) for k in missing)}"]
    arrival, n_iters, seed, raw = j["arrival_s"], j["n_iters"], j["seed"], j["profile"]
    out = []
    profile = None
    if not isinstance(raw, dict):
        out.append(f": 'profile' must be an object of a job profile's fields, got {raw!r}")
    else:
        try:
            profile = JobProfile(**raw)
        except (TypeError, ValueError) as err:
            out.append(f": {err}")
    if (isinstance(arrival, bool) or not isinstance(arrival, int | float) or not math.isfinite(arrival)
            or not 0 <= arrival <= MAX_ARRIVAL_H * 3600.0):
        out.append(f": arrival_s must be seconds from 0 to {MAX_ARRIVAL_H * 3600.0:.0f} (ten years), got {arrival!r}")
    if not _whole(n_iters) or not 1 <= n_iters <= MAX_ITERATIONS:
        out.append(f": n_iters must be a whole number from 1 to {MAX_ITERATIONS}, got {n_iters!r}")
    if not _whole(seed):
        out.append(f": seed must be a whole number >= 0, got {seed!r}")
    if out or profile is None:
        return None, out
    return TraceJob(float(arrival), n_iters, seed, profile), []


def _check_job_count(path: str | Path, count: int) -> None:
    """ValueError naming the file and its job count past `MAX_TRACE_JOBS`."""
    if count > MAX_TRACE_JOBS:
        raise ValueError(
            f"trace {path} has {count} jobs, more than {MAX_TRACE_JOBS} (the most --jobs allows): every "
            "job is simulated under every policy and the run time grows faster than the job count "
            "(2000 jobs take several minutes), so it would run for hours. Split it into traces "
            f"of at most {MAX_TRACE_JOBS} jobs"
        )


def _whole(value: object) -> bool:
    """A non-negative integer in JSON: 3, not 3.5, "3" or true."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _slo_pair(value: tuple) -> bool:
    """Two finite numbers, the first no larger: a range of SLOs."""
    numbers = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]
    return len(value) == 2 and len(numbers) == 2 and numbers[0] <= numbers[1]


def trace_problems(
    jobs: list[TraceJob],
    spec: ClusterSpec | None = None,
    csv_lines: dict[str, int] | None = None,
    numbers: list[int] | None = None,
) -> list[str]:
    """Every job profile's problems (`profile_problems`), node counts past `MAX_NODES` and
    repeated job ids, one line each; a job of a CSV file is named by its line there, one of
    a JSON file by its place in the file (`numbers`, if some of its jobs are left out)."""
    out, seen = [], set()
    for k, job in enumerate(jobs):
        i = numbers[k] if numbers else k
        line = csv_lines.get(job.profile.job_id) if csv_lines and isinstance(job.profile.job_id, str) else None
        name = f"line {line} ({job.profile.job_id})" if line else f"job #{i} ({job.profile.job_id})"
        problems = profile_problems(job.profile, spec)
        for field_name in ("n_rollout", "n_train"):
            value = getattr(job.profile, field_name)
            if isinstance(value, int) and value > MAX_NODES:
                problems.append(f"{field_name} must be a whole number of nodes from 1 to {MAX_NODES}, got {value!r}")
        out += [f"{name}: {p}" for p in problems]
        if not isinstance(job.profile.job_id, str):  # named above; a list or object cannot be counted
            continue
        if job.profile.job_id in seen:
            out.append(f"{name}: job_id repeats an earlier job's; ids must be unique")
        seen.add(job.profile.job_id)
    return out


def check_fits(trace: Trace, spec: ClusterSpec) -> None:
    """ValueError if a job's state fits no node's host memory under `spec` (it could run nowhere).

    Found only once the cluster is known, after the file's own checks: it names the
    file, and what would make such a job fit.
    """
    problems = trace_problems(trace.jobs, spec, trace.csv_lines)
    if problems:
        where = f"trace {trace.source}: " if trace.source else ""
        fix = ""
        if any("GB of host memory per" in p for p in problems):
            fix = (". A job's state must fit one node's host memory: give it more nodes (train_nodes, "
                   "rollout_nodes) or a smaller train_mem_gb / rollout_mem_gb, or give the nodes more "
                   "(host_mem_gb in a --cluster file)")
        raise ValueError(where + listed_problems(problems) + fix)


def make_profile(
    job_id: str,
    kind: str,
    size: str,
    rng: np.random.Generator,
    wl: WorkloadSpec,
    tail_rng: np.random.Generator | None = None,
) -> JobProfile:
    params_b, n_r, n_t = SIZES[size]
    lo, hi = KINDS[kind]
    rho = rng.uniform(lo, hi)
    length = rng.uniform(wl.l_min_s, wl.l_max_s)
    sync = 2.0 * params_b / wl.link_gb_s + wl.sync_fixed_s
    roll_typical, train_typical = typical_fractions()
    hold = 1.0
    if tail_rng is not None:
        hold = tail_hold(
            8 * n_r,
            ROLLOUT_TP[size],
            sigma=tail_rng.uniform(*wl.tail_sigma_range),
            n_responses=wl.responses_per_step,
            seed=int(tail_rng.integers(2**31)),
        )
    return JobProfile(
        job_id=job_id,
        kind=kind,
        size=size,
        n_rollout=n_r,
        n_train=n_t,
        roll_s=round(rho * length, 1),
        train_s=round((1.0 - rho) * length, 1),
        sync_s=round(sync, 1),
        local_sync_s=round(sync / 4.0, 1),
        train_mem_gb=16.0 * params_b / n_t,
        rollout_mem_gb=2.0 * params_b,
        slo=round(rng.uniform(*wl.slo_range), 3),
        # Rollout speed of a training-class GPU vs a rollout-class one:
        # compute-rich GPUs win on prefill, lose slightly on decode.
        colo_roll_speed=round(rng.uniform(0.85, 1.25), 3),
        roll_typical=round(roll_typical, 4),
        train_typical=round(train_typical, 4),
        tail_hold=round(hold, 4),
    )


def generate_trace(seed: int = 0, workload: WorkloadSpec | None = None) -> Trace:
    wl = workload or WorkloadSpec()
    rng = np.random.default_rng(seed)
    tail_rng = np.random.default_rng((seed, 1))  # its own stream: other fields stay as they were
    form_rng = np.random.default_rng((seed, 2))  # the same: a trace with forms differs only in them
    mean_gap = wl.span_days * 86400.0 / wl.n_jobs
    if wl.arrival == "poisson":
        gaps = rng.exponential(mean_gap, wl.n_jobs)
    elif wl.arrival == "philly":
        gaps = rng.gamma(0.25, mean_gap / 0.25, wl.n_jobs)
    else:
        raise ValueError(f"arrival must be 'poisson' or 'philly', got {wl.arrival!r}")
    arrivals = np.cumsum(gaps) - gaps[0]
    sizes = list(SIZES)
    kinds = list(KINDS)
    trace = Trace(seed, wl)
    for i, t in enumerate(arrivals):
        size = sizes[rng.choice(3, p=np.asarray(wl.size_weights) / sum(wl.size_weights))]
        kind = kinds[rng.choice(3, p=np.asarray(wl.kind_weights) / sum(wl.kind_weights))]
        prof = make_profile(f"j{i:04d}", kind, size, rng, wl, tail_rng)
        if wl.forms:
            prof = replace(prof, form=f"{size}-base{int(form_rng.integers(wl.forms))}")
        hours = rng.uniform(wl.h_min, wl.h_max)
        n_iters = max(2, round(hours * 3600.0 / prof.solo_iter_s))
        trace.jobs.append(TraceJob(float(t), int(n_iters), int(rng.integers(2**31)), prof))
    return trace


def iteration_factors(seed: int, n_iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-iteration (rollout, train) length factors in (0, 1] of the worst case."""
    rng = np.random.default_rng(seed)
    roll = np.minimum(1.0, np.exp(rng.normal(np.log(ROLL_FACTOR_MEDIAN), ROLL_FACTOR_SIGMA, n_iters)))
    train = rng.uniform(*TRAIN_FACTOR_RANGE, n_iters)
    return roll, train


def solo_iteration_s(job: TraceJob) -> np.ndarray:
    roll, train = iteration_factors(job.seed, job.n_iters)
    p = job.profile
    return p.roll_s * roll + p.sync_s + p.train_s * train
