"""The driver side of `roll-agentic mux`: start a multiplexer, or find the running one.

`run_session` starts Ray (local on loopback, or the configured cluster),
creates the named Multiplexer actor, writes `<output_dir>/current.json`
(Ray address, namespace, run dir) for `mux submit` / `mux status`, admits
the configured jobs and waits for them. With the solo baseline on (the
default outside --serve) the same jobs first run one after the other, alone,
through the same code in a fresh multiplexer, and the summary compares.
Ctrl-C or SIGTERM stops every job with its newest step checkpointed, and
`mux run --resume` goes on from there (`run_to_resume`, mux/job_stop.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import replace
from pathlib import Path

import ray

from roll_agentic.config import Config, RayConfig
from roll_agentic.hydra_config import load_config
from roll_agentic.mux.job_state import format_status
from roll_agentic.mux.multiplexer import ACTOR_NAME, NAMESPACE, multiplexer_actor
from roll_agentic.mux.mux_config import JobSpec, MuxConfig
from roll_agentic.mux.summary import earlier_passes, write_summary
from roll_agentic.train.run_lock import RunDirLock, fresh_run_name
from roll_agentic.train.termination import SigtermAsInterrupt, Terminated


def compose_job(spec: JobSpec) -> Config:
    return load_config(spec.overrides, config_dir=spec.config_dir or None, config_name=spec.config_name)


def pool_model_path(m: MuxConfig) -> str:
    from roll_agentic.train.job_setup import resolve_model_path

    cfg = Config()
    cfg.model.path, cfg.model.tiny_dir = m.model_path, m.tiny_dir
    return resolve_model_path(cfg)


def address_file(m: MuxConfig) -> Path:
    return Path(m.output_dir) / "current.json"


def start_multiplexer(m: MuxConfig, run_dir: Path, replacing=None):
    """A fresh named Multiplexer with its pools up, replacing `replacing` (this session's
    solo-baseline one). Another session's, on the same Ray cluster, is never killed: a
    second `mux run` pointed at a cluster used to end the multiplexer running there."""
    try:
        existing = ray.get_actor(ACTOR_NAME, namespace=NAMESPACE)
    except ValueError:
        existing = None
    if existing is not None:
        if replacing is None or existing._actor_id != replacing._actor_id:
            raise RuntimeError("a multiplexer already runs on this Ray cluster (`roll-agentic mux status` shows "
                               "it; `mux submit` adds jobs to it): end it (Ctrl-C where its `mux run` runs) "
                               "before starting another")
        ray.kill(existing)
        time.sleep(0.5)
    run_dir.mkdir(parents=True, exist_ok=True)
    mux = multiplexer_actor().options(name=ACTOR_NAME, namespace=NAMESPACE).remote(
        m, str(run_dir), pool_model_path(m))
    ray.get(mux.start.remote())
    return mux


def run_to_resume(m: MuxConfig, which: str) -> Path:
    """The run directory `mux run --resume WHICH` goes on in: `latest` (this yaml's newest
    run), a run's name under `output_dir`, or its path."""
    root = Path(m.output_dir)
    if which == "latest":
        runs = sorted((p for p in root.glob("*") if _run_of(p) == m.name), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise FileNotFoundError(f"--resume: no run of {m.name!r} under {root}/ to go on from; name one "
                                    "with `--resume RUN`")
        run = runs[-1]  # the newest, or an older run would be taken up unasked
    else:
        run = Path(which) if Path(which).is_dir() else root / which
    if not (run / "jobs").is_dir():
        raise FileNotFoundError(f"--resume {which}: {run} has no jobs to go on with (no jobs/ folder: not a "
                                "multiplexer run, or one stopped during its solo baseline); name the run "
                                "with `--resume RUN`, or start afresh")
    if run.resolve().parent != root.resolve():
        raise FileNotFoundError(f"--resume {which}: {run} is not under this yaml's output_dir ({root}/)")
    return run


RUN_RECORD = "mux_run.json"  # in each run directory: which yaml's run it is (`run_to_resume`)


def _run_of(path: Path) -> str | None:
    """The `name` of the mux yaml whose run `path` is; None if it is none."""
    return _run_record(path).get("name")


def with_overrides(jobs: list[JobSpec], overrides: list[str]) -> list[JobSpec]:
    """`jobs` with the command line's overrides after each one's own (the command line wins,
    as for `roll-agentic train`): `KEY=VALUE` for every job, `JOB:KEY=VALUE` for job JOB only.

    ConfigError for a `JOB:` that names no job (a typo would otherwise apply to none)."""
    from roll_agentic.config import ConfigError

    names = [s.name for s in jobs]
    mine: dict[str, list[str]] = {n: [] for n in names}
    for o in overrides:
        key = o.split("=", 1)[0]
        job, colon, rest = o.partition(":") if ":" in key else ("", "", o)
        if colon and job not in mine:
            raise ConfigError(f"{o}: no job named {job!r} (jobs: {', '.join(names)}); "
                              "JOB:KEY=VALUE sets KEY for job JOB only")
        for n in [job] if colon else names:
            mine[n].append(rest)
    return [replace(s, overrides=[*s.overrides, *mine[s.name]]) for s in jobs]


def run_overrides(path: Path) -> list[str]:
    """The overrides `mux run` was given for run `path` (a resume takes them again)."""
    got = _run_record(path).get("overrides")
    return [str(o) for o in got] if isinstance(got, list) else []


def _run_record(path: Path) -> dict:
    try:
        record = json.loads((path / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _stop_with_checkpoints(mux, why: str, resume_command: str) -> None:
    """Ctrl-C or SIGTERM: every job stops with its newest step checkpointed (mux/job_stop.py)."""
    print(f"{why}: stopping every job, each with its newest whole step checkpointed (a job mid-step finishes "
          f"that step first); {why} again stops at once", flush=True)
    jobs = ray.get(mux.stop.remote())
    for name, j in jobs.items():
        print(f"  {name:<14} {j['state']:<9} step {j['step']}/{j['total_steps']}  {j['reason']}", flush=True)
    if any(j["state"] == "stopped" for j in jobs.values()):
        print(f"to go on: {resume_command}", flush=True)


def _wait(mux, names: list[str] | None, status_every_s: float, quiet: bool) -> None:
    last = 0.0
    while not ray.get(mux.wait.remote(names, 1.0)):
        if not quiet and time.monotonic() - last > status_every_s:
            print(format_status(ray.get(mux.status.remote())), flush=True)
            last = time.monotonic()


def run_session(m: MuxConfig, jobs: list[tuple[JobSpec, Config]], solo_baseline: bool = True,
                serve: bool = False, status_every_s: float = 15.0, quiet: bool = False,
                run_name: str = "", resume: bool = False, config_path: str = "<yaml>",
                overrides: tuple[str, ...] = ()) -> dict:
    """`resume`: the jobs go on from their checkpoints in run `run_name` (no solo baseline).
    `overrides`: those the command line gave every job (recorded for a resume)."""
    from roll_agentic.cluster import init_ray

    run_dir = Path(m.output_dir) / (run_name or fresh_run_name(Path(m.output_dir), f"{m.name}-"))
    run_dir.mkdir(parents=True, exist_ok=True)  # an unwritable output_dir fails here, before Ray starts
    # One session per run folder: a resume typed twice would run every job twice, on
    # the same checkpoints and logs. RunDirInUse (a RuntimeError) is printed by the CLI.
    lock = RunDirLock(run_dir)
    lock.acquire()
    (run_dir / RUN_RECORD).write_text(json.dumps({"name": m.name, "config": config_path,
                                                  "overrides": list(overrides)}))
    try:
        started = init_ray(RayConfig(num_cpus=m.ray_num_cpus))
    except BaseException:
        lock.release()
        raise
    term = SigtermAsInterrupt().install()  # after ray.init, whose handler exits at once
    multiplexed = None  # the multiplexer of the jobs themselves (not the solo baseline's)
    try:
        solo, mux = None, None
        # A resume runs no solo baseline: it compares with the first session's, and keeps its passes.
        earlier = earlier_passes(run_dir) if resume else {}
        if resume:
            solo = earlier.get("solo")
        if solo_baseline and not serve and not resume:
            print(f"solo baseline: {len(jobs)} job(s) one after the other, alone", flush=True)
            mux = start_multiplexer(m, run_dir / "solo")
            _publish(m, run_dir, SOLO_PASS)  # `mux status` shows the baseline; `mux submit` waits
            for spec, cfg in jobs:
                ray.get(mux.submit.remote(cfg, spec))
                _wait(mux, [spec.name], status_every_s, quiet)
            solo = ray.get(mux.result.remote())
            ray.get(mux.shutdown.remote())
        mux = multiplexed = start_multiplexer(m, run_dir, replacing=mux)
        _publish(m, run_dir, MULTIPLEXED_PASS)
        print(f"multiplexer {ACTOR_NAME} up; run dir {run_dir}; `roll-agentic mux status` / `mux submit`",
              flush=True)
        for spec, cfg in jobs:
            ray.get(mux.submit.remote(cfg, spec, resume))
        _wait(mux, None, status_every_s, quiet)
        while serve:  # a long-lived multiplexer: jobs keep arriving through `mux submit`
            time.sleep(status_every_s)
            if not quiet:
                print(format_status(ray.get(mux.status.remote())), flush=True)
        status = ray.get(mux.status.remote())
        result = ray.get(mux.result.remote())
        summary = write_summary(run_dir, result, solo, earlier)
        ray.get(mux.shutdown.remote())
        print(format_status(status), flush=True)
        print(json.dumps({k: summary[k] for k in ("pool_busy_fraction", "solo_pool_busy_fraction", "job_slowdown",
                                                  "job_slowdown_basis", "job_slo", "warm_switch_s", "cold_switch_s")}, indent=1))
        for line in slo_misses(summary):  # the JSON above says so too, easy to miss
            print(line, flush=True)
        print(f"summary: {run_dir / 'mux_summary.json'}  gantt: {run_dir / 'mux_gantt.png'}", flush=True)
        return {"run_dir": str(run_dir), "summary": summary, "status": status}
    except KeyboardInterrupt:
        if multiplexed is None:
            print("stopped before the jobs were multiplexed (during the solo baseline or set-up): nothing to "
                  "go on with; start again (--no-solo skips the baseline)", flush=True)
        else:
            with contextlib.suppress(KeyboardInterrupt):  # pressed again: stop at once
                _stop_with_checkpoints(multiplexed, "SIGTERM" if term.received else "Ctrl-C",
                                       f"roll-agentic mux run {config_path} --resume {run_dir}")
        if term.received:  # raised as a plain KeyboardInterrupt where ray.get was waiting
            raise Terminated from None
        raise
    finally:
        term.restore()
        # Only the file this session wrote: a second `mux run` on the same output_dir that
        # failed early deleted the running multiplexer's, and `mux status` lost it.
        # (What failed may be that very folder: Ray still stops.)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(address_file(m).read_text()).get("pid") == os.getpid():
                address_file(m).unlink()
        if started:
            ray.shutdown()
        lock.release()


SOLO_PASS, MULTIPLEXED_PASS = "solo baseline", "multiplexed"  # the passes of a `mux run`


def _publish(m: MuxConfig, run_dir: Path, pass_name: str) -> None:
    """Where `mux status | submit | cancel` find this session's multiplexer, and which pass it runs."""
    address_file(m).parent.mkdir(parents=True, exist_ok=True)
    address_file(m).write_text(json.dumps({
        "address": ray.get_runtime_context().gcs_address, "namespace": NAMESPACE, "actor": ACTOR_NAME,
        "run_dir": str(run_dir), "pid": os.getpid(), "pass": pass_name}))


def running_pass(path: Path) -> str:
    """The pass the address file's multiplexer runs (`SOLO_PASS` or `MULTIPLEXED_PASS`);
    the latter for a file without one, or none at all (`connect` says what is wrong)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return str(json.loads(path.read_text()).get("pass", MULTIPLEXED_PASS))
    return MULTIPLEXED_PASS


def slo_misses(summary: dict) -> list[str]:
    """A line for each job whose slowdown ended past its SLO."""
    out = []
    for name, met in summary.get("job_slo_met", {}).items():
        if met is False:
            slowdown, slo = summary["job_slowdown"][name], summary["job_slo"][name]
            basis = summary.get("job_slowdown_basis", {}).get(name) or "solo"
            out.append(f"{name} missed its SLO: {slowdown:.2f}x its {basis} iteration, past {slo:.2f}x")
    return out


def _gone(info: dict) -> str:
    """Why the multiplexer an address file names is not there any more; "" if it may be."""
    host, _, port = str(info.get("address", "")).rpartition(":")
    pid = info.get("pid")
    if host in ("127.0.0.1", "localhost") and isinstance(pid, int):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"its process {pid} has exited"
        except PermissionError:
            pass  # alive, another user's
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            return ""
    except (OSError, ValueError) as err:
        return f"nothing answers at {info.get('address')}: {err}"


def connect(path: Path):
    """The running multiplexer named in an address file (written by `mux run`)."""
    from roll_agentic.cluster import loopback_environment

    if not path.exists():
        raise FileNotFoundError(f"no running multiplexer: {path} is missing (start one with `roll-agentic mux run`)")
    try:
        info = json.loads(path.read_text())
    except ValueError as err:  # torn or not ours
        raise FileNotFoundError(f"no running multiplexer: {path} is not a multiplexer's address file ({err}); "
                                "start one with `roll-agentic mux run`") from None
    if not isinstance(info, dict):
        raise FileNotFoundError(f"no running multiplexer: {path} is not a multiplexer's address file")
    gone = _gone(info)
    if gone:  # a multiplexer killed without its clean-up left the file: ray.init would retry for minutes
        raise FileNotFoundError(f"no running multiplexer: {path} names one that is gone ({gone}); "
                                "start one with `roll-agentic mux run`")
    loopback_environment()
    if not ray.is_initialized():
        ray.init(address=info["address"], namespace=info["namespace"], logging_level="WARNING",
                 log_to_driver=False)
    try:
        return ray.get_actor(info["actor"], namespace=info["namespace"])
    except (KeyError, ValueError):  # Ray is up, the multiplexer is not (it died, or the file is stale)
        raise FileNotFoundError(f"no running multiplexer: {path} names {info.get('actor')!r}, which is not "
                                f"alive at {info.get('address')}; start one with `roll-agentic mux run`") from None
