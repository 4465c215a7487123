"""`roll-agentic`: train, eval, model, env, serverless, sim, bench, mux.

Each subcommand has --help. Training takes Hydra overrides (key=value) after
`train`; a bad key or value ends the run before any work with one line.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shlex
import sys
from pathlib import Path

TRAIN_EPILOG = """\
overrides are key=value pairs composed over conf/config.yaml, for example:
  roll-agentic train trainer.total_steps=5 engine=hf algo.alpha=0
  roll-agentic train 'tasks=[{name:cliff,env_id:CliffWalking-v1,max_turns:20,format_penalty:2}]' trainer.total_steps=2
  roll-agentic train trainer.resume=true run_name=<run>   # continue a run from its last checkpoint
  roll-agentic train --config my_run.yaml trainer.lr=1e-5  # a run kept in a yaml (README: Quick start)
config groups: engine=auto|hf|vllm  algo=grpo|sync  reward=local|serverless
all keys: roll_agentic/config.py (the schema)."""

EVAL_EPILOG = """\
the same config as `train` (tasks, engine, reward); the model is model.path, for example:
  roll-agentic eval model.path=my_policy eval.episodes=64      # a policy `roll-agentic model export` wrote
  roll-agentic eval model.path=outputs/<run> eval.episodes=64  # a run's newest checkpoint, exported first
  roll-agentic eval eval.episodes=64                           # the base model, on the same seeds
results: a table, then a JSON object on the last line; also <output_dir>/<eval-TIME>/eval.json."""


def _load_config(args: argparse.Namespace):
    """The run's config from the command line (`train` and `eval`), or None once the error is said."""
    from roll_agentic.config import ConfigError
    from roll_agentic.hydra_config import load_config

    config_dir, config_name = args.config_dir, args.config_name
    if args.config:  # one file of the user's: its folder and name
        if config_dir is not None or config_name != "config":
            print("config error: give --config FILE, or --config-dir and --config-name, not both", file=sys.stderr)
            return None
        config_dir, config_name = os.path.dirname(os.path.abspath(args.config)), os.path.basename(args.config)
    try:
        return load_config(args.overrides, config_dir=config_dir, config_name=config_name)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return None


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if cfg is None:
        return 2
    from roll_agentic.train.job import train
    from roll_agentic.train.termination import EXIT_CODE as TERMINATED_EXIT_CODE

    try:
        result = train(cfg)
    except (OSError, RuntimeError, ValueError) as err:  # OSError: an unwritable output_dir, a missing file
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # during start-up: once training runs, Ctrl-C saves a checkpoint first
        from roll_agentic.train.termination import Terminated

        terminated = isinstance(stop, Terminated)
        print(f"{'terminated (SIGTERM)' if terminated else 'interrupted'} while starting: no step was taken, "
              "so nothing new to save", file=sys.stderr)
        return TERMINATED_EXIT_CODE if terminated else 130
    if result.get("interrupted") and result.get("steps", 0) < cfg.trainer.total_steps:
        _say_how_to_go_on(args, Path(result["run_dir"]))
    elif not result.get("interrupted"):
        _say_how_to_take_it_away(Path(result["run_dir"]))
    if result.get("terminated"):
        return TERMINATED_EXIT_CODE  # 143, as if SIGTERM's default had ended it: schedulers read it so
    return 130 if result.get("interrupted") else 0  # a script can tell a stopped run from a finished one


def _cmd_eval(args: argparse.Namespace) -> int:
    import json

    cfg = _load_config(args)
    if cfg is None:
        return 2
    from roll_agentic.train.policy_eval import eval_table, evaluate_policy

    try:
        result = evaluate_policy(cfg)
    except (OSError, RuntimeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:
        from roll_agentic.train.termination import EXIT_CODE as TERMINATED_EXIT_CODE
        from roll_agentic.train.termination import Terminated

        terminated = isinstance(stop, Terminated)
        print(f"{'terminated (SIGTERM)' if terminated else 'interrupted'}: no result", file=sys.stderr)
        return TERMINATED_EXIT_CODE if terminated else 130
    print("\n".join(eval_table(result)))
    print(json.dumps(result))
    return 0


def _resume_command(args: argparse.Namespace, run_dir: Path) -> str:
    """The command that continues a stopped run: its own config and overrides again (a resume
    runs with the settings of its command line), then `trainer.resume=true run_name=<run>`."""
    words = ["roll-agentic", "train"]
    if args.config:
        words += ["--config", args.config]
    else:
        if args.config_dir:
            words += ["--config-dir", args.config_dir]
        if args.config_name != "config":
            words += ["--config-name", args.config_name]
    own = [o for o in args.overrides if o.split("=", 1)[0].lstrip("+~") not in ("trainer.resume", "run_name")]
    words += [*own, "trainer.resume=true", f"run_name={run_dir.name}"]
    return shlex.join(words)


def _say_how_to_take_it_away(run_dir: Path) -> None:
    from roll_agentic.train.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir / "checkpoints") is not None:
        print(f"the trained policy as a Hugging Face model: roll-agentic model export {shlex.quote(str(run_dir))} "
              f"{shlex.quote(str(run_dir / 'policy'))}", flush=True)


def _say_how_to_go_on(args: argparse.Namespace, run_dir: Path) -> None:
    from roll_agentic.train.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir / "checkpoints") is not None:
        print(f"to go on: {_resume_command(args, run_dir)}", flush=True)


def _cmd_model_tiny(args: argparse.Namespace) -> int:
    from roll_agentic.model.tiny import build_tiny_model, ensure_tiny_model

    try:
        path = build_tiny_model(args.out, seed=args.seed) if args.force else ensure_tiny_model(args.out, args.seed)
    except OSError as err:  # an unwritable --out, or a file in its place
        print(f"error: cannot write the tiny model to {args.out}: {err}", file=sys.stderr)
        return 1
    print(f"tiny model written to {path}")
    return 0


def _cmd_model_export(args: argparse.Namespace) -> int:
    from roll_agentic.model.export import ExportError, export_checkpoint

    try:
        done = export_checkpoint(args.source, args.out, step=args.step, base=args.base, dtype=args.dtype)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # an unwritable --out, a disk that filled up: nothing half-written is left
        print(f"error: cannot export to {args.out}: {err}", file=sys.stderr)
        return 1
    step = f" (step {done.step})" if done.step >= 0 else ""
    print(f"exported {done.checkpoint}{step} to {done.out}: {done.tensors} tensors in "
          f"{done.dtype}, {done.bytes / 2**20:.1f} MiB, with the config and tokenizer of {done.base}")
    print(f"  load it as any Hugging Face model: AutoModelForCausalLM.from_pretrained({str(done.out)!r}), "
          f"vllm.LLM(model={str(done.out)!r}), or train on from it: roll-agentic train model.path={done.out}")
    return 0


def _cmd_env_check(args: argparse.Namespace) -> int:
    from envs.checker import check_env, print_result
    from roll_agentic.arg_types import json_object

    try:
        kwargs = json_object("--kwargs", args.kwargs)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    # Each line as its check ends: a slow env shows how far it got.
    results = check_env(args.env_id, kwargs, seed=args.seed, on_result=print_result)
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _cmd_env_new(args: argparse.Namespace) -> int:
    from pathlib import Path

    from envs.scaffold import ScaffoldError, next_steps, scaffold

    try:
        files = scaffold(args.name, Path(args.dir))
    except ScaffoldError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(str(f) for f in files))
    print(f"from {Path(args.dir).resolve()}, check it and train on it:")
    for line in next_steps(args.name):
        print(f"  {line}")
    return 0


def _add_optional(subparsers, name: str, module: str) -> None:
    """Subcommands whose code lives in their own packages register themselves."""
    try:
        importlib.import_module(module).add_parser(subparsers)
    except Exception as err:  # noqa: BLE001 - a missing extra or a broken module: the rest of the CLI works
        p = subparsers.add_parser(name, help=f"(unavailable: {type(err).__name__}: {err})")
        p.set_defaults(func=lambda _a, e=err: (print(f"unavailable: {type(e).__name__}: {e}", file=sys.stderr), 1)[1])


def _config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    p.add_argument("--config", "-c", default=None, metavar="FILE",
                   help="a yaml of your own run; `defaults: [config, _self_]` at its top starts it from "
                        "the default run (overrides on the command line still apply on top)")
    p.add_argument("--config-dir", default=None, help="directory holding config.yaml (default: the repo's conf/)")
    p.add_argument("--config-name", default="config", help="config file name without .yaml (default: %(default)s)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, of the optional commands just that one ("": none)."""
    parser = argparse.ArgumentParser(prog="roll-agentic", description="Agentic RL post-training for LLMs.")
    parser.add_argument("--version", action="version", version=f"roll-agentic {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a policy (hydra overrides follow)", epilog=TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _config_arguments(p)
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("eval", help="a policy's held-out episodes, no training (model.path=..., eval.episodes=...)",
                       epilog=EVAL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _config_arguments(p)
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("model", help="model utilities")
    msub = p.add_subparsers(dest="model_command", required=True)
    t = msub.add_parser("tiny", help="build the tiny Qwen2 model and tokenizer locally (no download)")
    t.add_argument("--out", default=".cache/tiny-model",
                   help="output directory (default: %(default)s): it must be a new or empty folder (or "
                        "an older tiny model's); any other folder is refused, never replaced")
    t.add_argument("--seed", type=int, default=0, help="initialisation seed (default: %(default)s)")
    t.add_argument("--force", action="store_true", help="rebuild even if an up-to-date model is there")
    t.set_defaults(func=_cmd_model_tiny)
    from roll_agentic.arg_types import at_least

    x = msub.add_parser("export", help="a run's checkpoint as a Hugging Face model directory (config, tokenizer, "
                                       "weights) that transformers, vLLM and model.path load")
    x.add_argument("source", help="a run directory (its newest checkpoint) or one checkpoint (…/checkpoints/step_N)")
    x.add_argument("out", help="the directory to write (new, or empty)")
    x.add_argument("--step", type=at_least(0), default=None, help="the run's checkpoint of this step")
    x.add_argument("--base", default=None, help="the model the run trained from (default: the one its "
                                                 "checkpoint or config names)")
    x.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
                   help="the weights' dtype (default: auto, the base model's)")
    x.set_defaults(func=_cmd_model_export)

    p = sub.add_parser("env", help="environment utilities")
    esub = p.add_subparsers(dest="env_command", required=True)
    c = esub.add_parser("check", help="conformance check of an env: types, text round trip, determinism")
    c.add_argument("env_id", help="a registered gymnasium id or module:Class")
    c.add_argument("--kwargs", default="", help="env kwargs as a JSON object (default: none)")
    c.add_argument("--seed", type=at_least(0), default=0, help="the first reset's seed (>= 0)")
    c.set_defaults(func=_cmd_env_check)
    n = esub.add_parser("new", help="write a working env and reward package to start a task from")
    n.add_argument("name", help="the package's name, e.g. my_task")
    n.add_argument("--dir", default=".", help="the folder to write it in (default: here)")
    n.set_defaults(func=_cmd_env_new)

    for name, module in OPTIONAL_COMMANDS.items():
        if only is None or only == name:
            _add_optional(sub, name, module)
    return name_commands(parser)


def _no_command(parser: argparse.ArgumentParser, commands: tuple[str, ...], _args: argparse.Namespace) -> int:
    parser.error(f"the following arguments are required: COMMAND ({', '.join(commands)})")
    return 2  # not reached: error() exits


def name_commands(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Each group's subcommands shown as COMMAND, and a group given none names those it has.

    argparse named a missing one by its internal dest: `roll-agentic serverless` said
    "the following arguments are required: serverless_cmd" (`sim`: sim_command). Now every
    group says "... required: COMMAND (start, deploy, ...)". The group's own default `func`
    says it, so that a subcommand given is parsed as before (its `func` replaces the group's).
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        action.metavar = "COMMAND"
        if action.required:
            action.required = False
            parser.set_defaults(func=functools.partial(_no_command, parser, tuple(action.choices)))
        for child in action.choices.values():
            name_commands(child)
    return parser


def version() -> str:
    """The installed distribution's version, else (a checkout run without installing) pyproject.toml's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("roll-agentic")
    except PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


# Commands registered by their own packages. Some (bench) import torch and Ray to
# describe their options: a command line that names another command skips them,
# so `roll-agentic serverless start` runs light (a worker's Max Memory Used once
# counted the emulator's 260 MB).
CORE_COMMANDS = ("train", "eval", "model", "env")
OPTIONAL_COMMANDS = {
    "serverless": "serverless.cli",
    "sim": "roll_agentic.sim.cli",
    "bench": "roll_agentic.bench.cli",
    "mux": "roll_agentic.mux.cli",
    "reward": "roll_agentic.reward.cli",
}


def _import_from_here() -> None:
    """Modules in the current folder import, as under `python -m`: a user's `my_pkg.my_env:MyEnv`.

    The console script put only the installed packages on the path, so an env
    or reward package beside the user failed to import. PYTHONPATH carries the
    folder to the processes a run starts (Ray's workers, the emulator).
    """
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])


def _unrecognized(parser: argparse.ArgumentParser, argv: list[str], extras: list[str]) -> None:
    """Exit naming the unknown arguments with the usage of the command they were given to
    (argparse showed the top level's, `roll-agentic [-h] {train,...}`, for `sim compare --jbos`),
    and the closest option it has."""
    import difflib

    leaf = parser
    for token in argv:
        subs = [a for a in leaf._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            leaf = subs[0].choices[token]
    message = f"unrecognized arguments: {' '.join(extras)}"
    options = [o for a in leaf._actions for o in a.option_strings if o.startswith("--")]
    for extra in extras:
        close = difflib.get_close_matches(extra.split("=")[0], options, n=1, cutoff=0.6)
        if extra.startswith("--") and close:
            message += f" (did you mean {close[0]}?)"
            break
    leaf.error(message)


def main(argv: list[str] | None = None) -> int:
    _import_from_here()
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and not argv[0].startswith("-") else None
    # A command line naming a command builds that command's parser alone: `env check`
    # imported bench (torch and Ray, ~10 s) just to list it. A typo or no command gets
    # them all, for the list of choices; `--version` none of the optional ones.
    if command in (*OPTIONAL_COMMANDS, *CORE_COMMANDS):
        only = command
    else:
        only = "" if argv[:1] == ["--version"] else None
    parser = build_parser(only=only)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unrecognized(parser, argv, extras)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C in a command that has no handler of its own: no traceback
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
