"""`roll-agentic mux run | submit | status | cancel`: the phase multiplexer from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from roll_agentic.arg_types import positive

if TYPE_CHECKING:
    from roll_agentic.mux.mux_config import MuxConfig

RUN_EPILOG = """\
the yaml names the pools and the jobs (see conf/mux/two_tiny.yaml):
  roll-agentic mux run conf/mux/two_tiny.yaml             # solo baseline, then multiplexed
  roll-agentic mux run conf/mux/two_tiny.yaml --no-solo   # multiplexed only
  roll-agentic mux run conf/mux/two_tiny.yaml --serve     # stay up for `mux submit`
  roll-agentic mux run conf/mux/two_tiny.yaml --resume    # go on from the newest run's checkpoints
  roll-agentic mux run conf/mux/two_tiny.yaml trainer.lora_rank=8   # overrides for every job (LoRA here)
  roll-agentic mux run conf/mux/two_tiny.yaml roll_heavy:trainer.lora_rank=8   # for one job
Ctrl-C or SIGTERM stops every job with its newest step checkpointed; --resume goes on from there.
`mux run` stays in the foreground: the multiplexer actor lives as long as it does.
Output: <output_dir>/<name>-<time>/ with mux_summary.json, mux_gantt.png and jobs/<job>/."""


def _load_jobs(path: str):
    from roll_agentic.mux.mux_config import parse_jobs, read_yaml

    specs = parse_jobs(read_yaml(path) or {}, where=f"{path}: job")
    return composed(specs)


def composed(specs, m=None):
    """Each job's spec and config, none refused by its config alone: else a ConfigError that
    names the job (before, a refused job showed only in a status line while the others ran).

    `m` (the mux settings): each job's `engine.*` also checked against the shared engines it
    will run on, and its engine section made theirs (mux/job_engine_config.py)."""
    from roll_agentic.config import ConfigError
    from roll_agentic.mux.admission import config_refusal
    from roll_agentic.mux.job_engine_config import on_pool_engines, pool_problem
    from roll_agentic.mux.session import compose_job

    jobs = []
    for spec in specs:
        try:
            cfg = compose_job(spec)
        except ConfigError as err:
            raise ConfigError(f"job {spec.name}: {err}") from None
        # Its own pools are refused whatever the shared engines (`pool_problem`).
        why = config_refusal(cfg) or pool_problem(cfg)
        if why:
            raise ConfigError(f"job {spec.name}: {why}")
        jobs.append((spec, cfg if m is None else on_pool_engines(spec, cfg, m)))
    return jobs


def pool_settings(mux) -> MuxConfig | None:
    """The running multiplexer's `MuxConfig`: what its shared engines were built from
    (`Multiplexer.settings`); None for a stand-in handle without that method (nothing is
    checked against the engines then)."""
    import ray

    settings = getattr(mux, "settings", None)
    return None if settings is None else ray.get(settings.remote())


def failed_jobs(summary: dict) -> list[str]:
    """Jobs that ended refused or failed: `mux run` then exits 1, so a script can tell."""
    from roll_agentic.mux.job_state import JobState

    ended_badly = (JobState.REFUSED, JobState.FAILED)
    return [f"{n} ({s})" for n, s in summary.get("job_state", {}).items() if s in ended_badly]


def _cmd_run(args: argparse.Namespace) -> int:
    from roll_agentic.config import ConfigError
    from roll_agentic.mux.mux_config import load_mux_config
    from roll_agentic.mux.session import (
        run_overrides,
        run_session,
        run_to_resume,
        with_overrides,
    )
    from roll_agentic.train.termination import EXIT_CODE as TERMINATED_EXIT_CODE
    from roll_agentic.train.termination import Terminated

    try:
        m = load_mux_config(args.config)
        if "=" in args.resume and not Path(args.resume).exists():
            # `--resume trainer.lr=1e-3`: argparse took the override for the run's name.
            args.overrides, args.resume = [args.resume, *args.overrides], "latest"
        if args.resume and args.run_name:
            raise ConfigError("--resume names the run to go on with: drop --run-name")
        run = run_to_resume(m, args.resume) if args.resume else None
        overrides = list(args.overrides)
        if run is not None and not overrides and run_overrides(run):
            overrides = run_overrides(run)  # a LoRA run's jobs must go on as LoRA jobs, etc.
            print(f"resuming with the run's overrides: {' '.join(overrides)}", file=sys.stderr)
        m.jobs = with_overrides(m.jobs, overrides)
        jobs = composed(m.jobs, m)  # engine.* against the pool's engines, before anything starts
        run_name = run.name if run is not None else args.run_name
    except (ConfigError, FileNotFoundError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    try:
        ran = run_session(m, jobs, solo_baseline=not args.no_solo, serve=args.serve, status_every_s=args.status_every,
                    quiet=args.quiet, run_name=run_name, resume=bool(args.resume), config_path=args.config,
                    overrides=tuple(overrides))
    except Terminated:  # a job scheduler's SIGTERM: the same clean-up as Ctrl-C
        print("terminated (SIGTERM)", file=sys.stderr)
        return TERMINATED_EXIT_CODE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, RuntimeError) as err:  # output_dir not writable; Ray unreachable; a multiplexer runs there
        print(f"error: {err}", file=sys.stderr)
        return 1
    failed = failed_jobs(ran.get("summary", {}))
    if failed:
        print(f"not every job finished: {', '.join(failed)} (reasons in the status above)", file=sys.stderr)
        return 1
    return 0


def _address(args: argparse.Namespace) -> Path:
    if args.address_file:
        return Path(args.address_file)
    from roll_agentic.mux.mux_config import load_mux_config
    from roll_agentic.mux.session import address_file

    return address_file(load_mux_config(args.config)) if args.config else Path("outputs/mux/current.json")


def _cmd_submit(args: argparse.Namespace) -> int:
    import ray

    from roll_agentic.config import ConfigError
    from roll_agentic.mux.job_engine_config import on_pool_engines
    from roll_agentic.mux.session import connect

    try:
        jobs = _load_jobs(args.job)
        if _in_solo_pass(args, "submit"):
            return 1
        mux = connect(_address(args))
        # Each job's engine.* against the engines it would share, before it is submitted.
        settings = pool_settings(mux)
        if settings is not None:
            jobs = [(spec, on_pool_engines(spec, cfg, settings)) for spec, cfg in jobs]
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ray.exceptions.RayActorError as err:  # the multiplexer died meanwhile
        print(f"error: {_died(err)}", file=sys.stderr)
        return 1
    failed = 0
    for spec, cfg in jobs:
        try:
            rec = ray.get(mux.submit.remote(cfg, spec, args.resume))
        except ray.exceptions.RayTaskError as err:  # the multiplexer refused it: say why, in one line
            cause = err.cause if isinstance(getattr(err, "cause", None), Exception) else err
            print(f"{spec.name}: not submitted: {cause}", file=sys.stderr)
            failed += 1
            continue
        except ray.exceptions.RayActorError as err:  # the multiplexer died meanwhile
            print(f"{spec.name}: not submitted: {_died(err)}", file=sys.stderr)
            return 1
        print(f"{spec.name}: {rec['state']}" + (f" ({rec['reason']})" if rec["reason"] else ""))
    return 1 if failed else 0


def _connect(args: argparse.Namespace):
    """The running multiplexer's handle, or None after saying why there is none."""
    from roll_agentic.config import ConfigError
    from roll_agentic.mux.session import connect

    try:
        return connect(_address(args))
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def _in_solo_pass(args: argparse.Namespace, doing: str) -> bool:
    """True, after saying so, while `mux run` runs its solo baseline: a job submitted or
    cancelled then would change the baseline the multiplexed pass is measured against."""
    from roll_agentic.mux.session import SOLO_PASS, running_pass

    if running_pass(_address(args)) != SOLO_PASS:
        return False
    print(f"error: `mux run` is running its solo baseline (each job alone, one after the other): {doing} "
          "once the multiplexed pass starts (`roll-agentic mux status` says which pass runs)", file=sys.stderr)
    return True


def _died(err: Exception) -> str:
    """One line for a multiplexer that died while answering (Ray's message runs to a page)."""
    return f"the multiplexer died while answering ({type(err).__name__}); start one with `roll-agentic mux run`"


def _cmd_status(args: argparse.Namespace) -> int:
    import ray

    from roll_agentic.mux.job_state import format_status

    mux = _connect(args)
    if mux is None:
        return 2
    try:
        snap = ray.get(mux.status.remote())
    except ray.exceptions.RayTaskError:  # it answered with an error of its own (may wrap a dead actor of its)
        raise
    except ray.exceptions.RayActorError as err:
        print(f"error: {_died(err)}", file=sys.stderr)
        return 1
    from roll_agentic.mux.session import SOLO_PASS, running_pass

    now_running = running_pass(_address(args))
    if args.json:
        print(json.dumps({**snap, "pass": now_running}, indent=1, default=str))
    else:
        if now_running == SOLO_PASS:
            print("solo baseline pass: each job alone, one after the other; the multiplexed pass follows")
        print(format_status(snap))
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    import ray

    from roll_agentic.config import ConfigError

    try:  # a missing or bad --config is one line, as for submit and status (it was a traceback)
        if _in_solo_pass(args, "cancel"):
            return 1
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    mux = _connect(args)
    if mux is None:
        return 2
    try:
        ok = ray.get(mux.cancel.remote(args.name))
    except ray.exceptions.RayTaskError:  # it answered with an error of its own (may wrap a dead actor of its)
        raise
    except ray.exceptions.RayActorError as err:
        print(f"error: {_died(err)}", file=sys.stderr)
        return 1
    if ok:  # its reason says which step it was saved at (`Multiplexer.cancel`)
        job = {j["name"]: j for j in ray.get(mux.status.remote())["jobs"]}.get(args.name)
        print(f"{args.name}: {job['reason'] if job and job['reason'] else 'cancelled'}")
    else:  # a name never submitted and a job already over read differently
        jobs = {j["name"]: j for j in ray.get(mux.status.remote())["jobs"]}
        job = jobs.get(args.name)
        print(f"{args.name}: no such job here (jobs: {', '.join(jobs) or 'none'})" if job is None
              else f"{args.name}: not running ({job['state']})")
    return 0 if ok else 1


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address-file", default="", help="the running multiplexer's current.json "
                   "(default: <output_dir>/current.json of --config, else outputs/mux/current.json)")
    p.add_argument("--config", default="", help="the mux yaml the multiplexer was started with (default: none)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("mux", help="phase multiplexer: several jobs share rollout and training pools")
    sub = p.add_subparsers(dest="mux_command", required=True)

    r = sub.add_parser("run", help="start the multiplexer with the pools and jobs of a yaml",
                       epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("config", help="conf/mux/<name>.yaml")
    r.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="hydra overrides added to every job's own, e.g. trainer.lora_rank=8, or to one "
                        "job's with JOB:KEY=VALUE (a --resume takes the run's again unless others are given)")
    r.add_argument("--no-solo", action="store_true", help="skip the solo baseline (slowdowns are then taken against each job's profiled solo iteration)")
    r.add_argument("--serve", action="store_true", help="stay up after the listed jobs, for `mux submit` (Ctrl-C stops every job, checkpointed)")
    r.add_argument("--status-every", type=positive, default=15.0, help="seconds between status prints (default: %(default)s)")
    r.add_argument("--quiet", action="store_true", help="no periodic status")
    r.add_argument("--run-name", default="", help="run dir name under output_dir (default: <name>-<time>)")
    r.add_argument("--resume", nargs="?", const="latest", default="", metavar="RUN",
                   help="go on with a stopped run (its name under output_dir, or its path; alone: the newest): "
                        "each job continues from its checkpoint there; no solo baseline")
    r.set_defaults(func=_cmd_run)

    s = sub.add_parser("submit", help="add job(s) to the running multiplexer")
    s.add_argument("job", help="a yaml with one job (name, slo, overrides) or a `jobs:` list")
    s.add_argument("--resume", action="store_true", help="a job stopped with its multiplexer goes on from its "
                   "checkpoint in the run `mux run --resume` continues (else it starts afresh)")
    _where(s)
    s.set_defaults(func=_cmd_submit)

    st = sub.add_parser("status", help="groups, jobs, phases and SLO standing of the running multiplexer")
    st.add_argument("--json", action="store_true", help="the raw snapshot")
    _where(st)
    st.set_defaults(func=_cmd_status)

    cancel_help = ("cancel a job, its newest finished step checkpointed first (`mux submit --resume` goes on "
                   "from it); its permits and residency are released")
    c = sub.add_parser("cancel", help=cancel_help, description=cancel_help + ". While `mux run` stops, the "
                       "stop ends the job instead; a step cut in its update is not saved.")
    c.add_argument("name", help="the job's name, as `mux status` lists it")
    _where(c)
    c.set_defaults(func=_cmd_cancel)
