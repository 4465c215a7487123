"""`roll-agentic train` when start-up is interrupted: what it started stops, one line, exit 130."""

import pytest

from roll_agentic.cli import main
from roll_agentic.train import job as job_module


def test_ctrl_c_while_starting_stops_what_started_and_says_so(monkeypatch, tmp_path, capsys):
    closed = []

    def start(self):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        raise KeyboardInterrupt  # as Ctrl-C lands while engines load

    monkeypatch.setattr(job_module.TrainingJob, "start", start)
    monkeypatch.setattr(job_module.TrainingJob, "close", lambda self, graceful=True: closed.append(graceful))
    assert main(["train", f"output_dir={tmp_path}", "trainer.total_steps=1"]) == 130
    assert closed == [False]  # killed, not waited on: some actors may still be starting
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interrupted while starting: no step was taken, so nothing new to save"]


def test_an_env_package_in_the_current_folder_imports_through_the_console_script(tmp_path):
    """The README's `roll-agentic env check my_pkg.my_env:MyEnv`: before, the console script
    could not import a package beside the user (only `python -m` could)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "roll-agentic"
    if not script.exists():
        pytest.skip("no console script beside this interpreter")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "my_env.py").write_text(
        "from envs.guess_number import GuessNumber\n\nclass MyEnv(GuessNumber):\n    pass\n")
    out = subprocess.run([str(script), "env", "check", "mypkg.my_env:MyEnv"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 failed" in out.stdout


def test_a_core_command_builds_no_optional_command(tmp_path):
    """`env check` and `train` name no optional command: bench (torch and Ray) is not imported for them."""
    import subprocess
    import sys

    code = ("import sys; from roll_agentic.cli import main; rc = main(['env', 'check', 'CliffWalking-v1']); "
            "print(rc, 'torch' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.stdout.strip().splitlines()[-1] == "0 False False", out.stdout + out.stderr


def test_a_broken_optional_command_leaves_the_others_usable(monkeypatch, capsys):
    from roll_agentic import cli

    monkeypatch.setitem(cli.OPTIONAL_COMMANDS, "sim", "tests.no_such_module_here.cli")
    assert cli.main(["sim"]) == 1
    assert "unavailable: ModuleNotFoundError" in capsys.readouterr().err


def test_ctrl_c_in_a_command_without_its_own_handler_is_one_line_and_130(monkeypatch, capsys):
    """Before, Ctrl-C during `model tiny` (or `env check`, `mux status` ...) printed a traceback."""
    from roll_agentic.model import tiny

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tiny, "ensure_tiny_model", interrupted)
    assert main(["model", "tiny"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted"]


def test_model_tiny_where_it_cannot_be_written_is_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert main(["model", "tiny", "--out", str(tmp_path / "a_file" / "model")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write the tiny model to ")


def _fake_build(calls):
    import json

    def build(out, seed=0, **_k):
        out.mkdir(parents=True)
        (out / "roll_agentic_tiny.json").write_text(json.dumps({"version": 2, "seed": seed}))
        calls.append(seed)
        return out

    return build


def test_model_tiny_rebuilds_a_torn_marker_and_honours_seed(monkeypatch, tmp_path, capsys):
    """A torn marker file was a JSONDecodeError traceback; `--seed` without --force was ignored."""
    import json

    from roll_agentic.model import tiny

    calls = []
    monkeypatch.setattr(tiny, "build_tiny_model", _fake_build(calls))
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "roll_agentic_tiny.json").write_text('{"vers')  # killed while writing it
    assert main(["model", "tiny", "--out", str(out)]) == 0
    assert main(["model", "tiny", "--out", str(out)]) == 0  # up to date: not rebuilt
    assert main(["model", "tiny", "--out", str(out), "--seed", "5"]) == 0
    assert calls == [0, 5]
    assert json.loads((out / "roll_agentic_tiny.json").read_text())["seed"] == 5
    assert tiny.ensure_tiny_model(out) == out and calls == [0, 5]  # callers naming no seed take any


def test_mux_status_with_a_torn_address_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "current.json"
    path.write_text('{"address": "127.0')
    assert main(["mux", "status", "--address-file", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no running multiplexer:")


def test_mux_status_when_ray_is_up_but_the_multiplexer_is_not_is_one_line(monkeypatch, tmp_path, capsys):
    """A stale address file whose Ray still runs (another job's, or the multiplexer alone died):
    ray.get_actor's ValueError was a traceback."""
    import json

    import ray

    from roll_agentic.mux import session

    def no_actor(name, namespace=None):
        raise ValueError(f"Failed to look up actor with name '{name}'.")

    monkeypatch.setattr(session, "_gone", lambda info: "")
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_actor", no_actor)
    path = tmp_path / "current.json"
    path.write_text(json.dumps({"address": "127.0.0.1:6379", "namespace": "ns", "actor": "mux", "pid": 1}))
    for cmd in (["status"], ["cancel", "job"]):
        assert main(["mux", *cmd, "--address-file", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: no running multiplexer:"), err


def test_mux_commands_when_the_multiplexer_dies_while_answering_are_one_line(monkeypatch, tmp_path, capsys):
    import ray

    from roll_agentic.mux import session

    class Method:
        def remote(self, *_a):
            return "ref"

    class Handle:
        status = cancel = submit = Method()

    def died(*_a, **_k):
        raise ray.exceptions.ActorDiedError()

    monkeypatch.setattr(session, "connect", lambda path: Handle())
    monkeypatch.setattr(ray, "get", died)
    job = tmp_path / "job.yaml"
    job.write_text("name: j\noverrides: [algo=sync]\n")  # a job the multiplexer can run
    for cmd in (["status"], ["cancel", "j"], ["submit", str(job)]):
        assert main(["mux", *cmd, "--address-file", str(tmp_path / "current.json")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the multiplexer died while answering" in err[0], err


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_mux_run_refuses_a_status_interval_it_cannot_sleep(value, capsys):
    """`--serve --status-every -1` started Ray and the pools, then died on time.sleep(-1)."""
    with pytest.raises(SystemExit) as exit_:
        main(["mux", "run", "no_such_mux.yaml", "--serve", "--status-every", value])
    assert exit_.value.code == 2
    assert "--status-every: must be a number above 0" in capsys.readouterr().err


def test_mux_run_into_an_unwritable_output_dir_is_one_line(monkeypatch, tmp_path, capsys):
    """Before: a NotADirectoryError traceback, raised again by the clean-up (so Ray was not shut down)."""
    from roll_agentic import cluster
    from roll_agentic.mux import session

    def start(m, run_dir, replacing=None):  # as the real one: the run folder first
        run_dir.mkdir(parents=True, exist_ok=True)
        raise AssertionError("not reached")

    monkeypatch.setattr(cluster, "init_ray", lambda cfg: False)
    monkeypatch.setattr(session, "start_multiplexer", start)
    (tmp_path / "a_file").write_text("")
    yaml = tmp_path / "mux.yaml"
    yaml.write_text(f"name: t\noutput_dir: {tmp_path / 'a_file' / 'out'}\njobs: []\n")
    assert main(["mux", "run", str(yaml), "--no-solo", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Not a directory" in err[0], err


def test_env_check_kwargs_that_are_not_an_object_are_one_line(capsys):
    assert main(["env", "check", "CliffWalking-v1", "--kwargs", "[1]"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["--kwargs must be a JSON object, got [1]"]


def test_train_into_an_unwritable_output_dir_is_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert main(["train", f"output_dir={tmp_path / 'a_file' / 'out'}", "trainer.total_steps=1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Not a directory" in err[0], err


def test_mux_run_beside_a_running_multiplexer_is_one_line(tmp_path, monkeypatch, capsys):
    from roll_agentic import cluster
    from roll_agentic.mux import session

    def start(m, run_dir, replacing=None):
        raise RuntimeError("a multiplexer already runs on this Ray cluster (...)")

    monkeypatch.setattr(cluster, "init_ray", lambda cfg: False)
    monkeypatch.setattr(session, "start_multiplexer", start)
    yaml = tmp_path / "mux.yaml"
    yaml.write_text(f"name: t\noutput_dir: {tmp_path / 'out'}\njobs: []\n")
    assert main(["mux", "run", str(yaml), "--no-solo", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: a multiplexer already runs on this Ray cluster (...)"], err


class _Answer:
    """A multiplexer method's stand-in: `.remote()` gives the answer (ray.get patched to pass it on)."""

    def __init__(self, value):
        self.value = value

    def remote(self, *_a):
        return self.value


def test_mux_cancel_tells_an_unknown_name_from_a_job_already_over(monkeypatch, tmp_path, capsys):
    """Both said "not running"."""
    import ray

    from roll_agentic.mux import session

    class Handle:
        cancel = _Answer(False)
        status = _Answer({"jobs": [{"name": "done1", "state": "done"}]})

    monkeypatch.setattr(session, "connect", lambda path: Handle())
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    address = ["--address-file", str(tmp_path / "current.json")]
    assert main(["mux", "cancel", "done1", *address]) == 1
    assert capsys.readouterr().out.strip() == "done1: not running (done)"
    assert main(["mux", "cancel", "typo", *address]) == 1
    assert capsys.readouterr().out.strip() == "typo: no such job here (jobs: done1)"


def test_a_stopped_run_prints_the_command_that_goes_on(monkeypatch, tmp_path, capsys):
    """Stopped by Ctrl-C or SIGTERM with a checkpoint saved: the run's own overrides again
    (a resume runs with its command line's settings), quoted for the shell, then the resume."""
    import shlex

    import torch

    from roll_agentic.train.checkpoint import save_checkpoint

    run_dir = tmp_path / "20261128-120000"
    save_checkpoint(run_dir / "checkpoints", 2, {"w": torch.zeros(1)}, {}, {"buffer": {}}, keep=2)
    monkeypatch.setattr(job_module, "train", lambda cfg: {"run_dir": str(run_dir), "steps": 2, "interrupted": True,
                                                         "terminated": True, "metrics": []})
    task = 'tasks=[{name:guess,env_id:"envs.guess_number:GuessNumber",max_turns:3,reward:guess_number}]'
    assert main(["train", f"output_dir={tmp_path}", "engine=hf", task, "trainer.total_steps=5"]) == 143
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("to go on: ")
    assert shlex.split(line.removeprefix("to go on: ")) == [
        "roll-agentic", "train", f"output_dir={tmp_path}", "engine=hf", task, "trainer.total_steps=5",
        "trainer.resume=true", "run_name=20261128-120000"]


def test_a_finished_run_prints_the_command_that_exports_its_policy(monkeypatch, tmp_path, capsys):
    import shlex

    import torch

    from roll_agentic.train.checkpoint import save_checkpoint

    run_dir = tmp_path / "my run"
    save_checkpoint(run_dir / "checkpoints", 5, {"w": torch.zeros(1)}, {}, {"buffer": {}}, keep=2)
    monkeypatch.setattr(job_module, "train", lambda cfg: {"run_dir": str(run_dir), "steps": 5, "interrupted": False,
                                                         "terminated": False, "metrics": []})
    assert main(["train", f"output_dir={tmp_path}", "engine=hf", "trainer.total_steps=5"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    words = shlex.split(line.removeprefix("the trained policy as a Hugging Face model: "))
    assert words == ["roll-agentic", "model", "export", str(run_dir), str(run_dir / "policy")]


def test_mux_commands_during_the_solo_baseline_say_so(monkeypatch, tmp_path, capsys):
    """`mux status` during `mux run`'s solo pass said no multiplexer ran; a job submitted
    then would have joined the baseline the multiplexed pass is measured against."""
    import json

    import ray

    from roll_agentic.mux import session

    class Handle:
        status = _Answer({"name": "m", "run_dir": "r/solo", "uptime_s": 3.0, "jobs": []})
        cancel = submit = _Answer(None)

    monkeypatch.setattr(session, "connect", lambda path: Handle())
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    address = tmp_path / "current.json"
    address.write_text(json.dumps({"address": "127.0.0.1:1", "pass": session.SOLO_PASS}))
    job = tmp_path / "job.yaml"
    job.write_text("name: j\noverrides: [algo=sync]\n")
    for cmd, doing in ((["submit", str(job)], "submit"), (["cancel", "j"], "cancel")):
        assert main(["mux", *cmd, "--address-file", str(address)]) == 1
        err = capsys.readouterr().err
        assert "running its solo baseline" in err and f"{doing} once the multiplexed pass starts" in err
    assert main(["mux", "status", "--address-file", str(address)]) == 0
    assert capsys.readouterr().out.startswith("solo baseline pass:")
    assert main(["mux", "status", "--json", "--address-file", str(address)]) == 0
    assert json.loads(capsys.readouterr().out)["pass"] == session.SOLO_PASS


def test_a_job_past_its_slo_gets_a_line_of_its_own():
    from roll_agentic.mux.session import slo_misses

    summary = {"job_slo_met": {"a": True, "b": False, "c": None}, "job_slowdown": {"a": 1.1, "b": 1.62, "c": None},
               "job_slo": {"a": 1.5, "b": 1.5, "c": 2.0}, "job_slowdown_basis": {"b": "solo pass"}}
    assert slo_misses(summary) == ["b missed its SLO: 1.62x its solo pass iteration, past 1.50x"]


def _help(capsys, *argv: str) -> str:
    """`roll-agentic ARGV --help`, its lines joined (argparse wraps a help text anywhere)."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_version_is_the_distributions():
    """`roll-agentic --version`: the installed distribution's version, and builds no optional command."""
    import importlib.metadata
    import subprocess
    import sys

    code = ("import sys; from roll_agentic.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == [f"roll-agentic {importlib.metadata.version('roll-agentic')}", "0 False"], out.stderr


def test_version_without_the_distribution_is_pyprojects(monkeypatch):
    import importlib.metadata
    import tomllib
    from pathlib import Path

    from roll_agentic import cli

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    pyproject = tomllib.loads((Path(cli.__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "roll-agentic"
    assert cli.version() == pyproject["project"]["version"]


@pytest.mark.parametrize("argv, commands", [
    ([], "train, eval, model, env, serverless, sim, bench, mux, reward"),
    (["model"], "tiny, export"),
    (["env"], "check, new"),
    (["serverless"], "start, deploy, list, invoke, logs, stop"),
    (["sim"], "compare, optimality, scale, repack, affinity"),
    (["reward"], "check"),
    (["bench"], "engine, rollout, serverless, tail, reliability, switch, lora"),
    (["mux"], "run, submit, status, cancel"),
])
def test_a_group_without_its_command_names_the_commands_it_has(argv, commands, capsys):
    """`roll-agentic serverless` said "the following arguments are required: serverless_cmd" (sim:
    sim_command, bench: bench_command): argparse's internal names, not what to type."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"error: the following arguments are required: COMMAND ({commands})" in err
    assert "_cmd" not in err and "_command" not in err
    assert f"usage: roll-agentic {' '.join(argv)}{' ' if argv else ''}[-h]" in err


def test_the_standalone_serverless_cli_names_the_commands_too(capsys):
    from serverless import cli

    with pytest.raises(SystemExit):
        cli.main([])
    assert "required: COMMAND (start, deploy, list, invoke, logs, stop)" in capsys.readouterr().err


def _all_arguments():
    import argparse

    from roll_agentic.cli import build_parser

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, [*path, name])
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield " ".join(path), action

    return list(walk(build_parser(), []))


def test_every_argument_has_help_and_every_option_its_default():
    """`bench reliability --load-rounds` and `mux cancel name` had no help, `bench tail --steps`,
    `serverless start --port` and others no word of their default."""
    missing, silent = [], []
    for command, action in _all_arguments():
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            missing.append(f"{command} {name}")
        elif (action.option_strings and action.default not in (None, False, "")
              and "default" not in action.help.lower()):
            silent.append(f"{command} {name} (default {action.default!r})")
    assert not missing, f"no help: {missing}"
    assert not silent, f"a default the help does not say: {silent}"


@pytest.mark.parametrize("argv, says", [
    (["bench", "tail"], ["--steps STEPS steps measured per mode (default: 20)"]),
    (["bench", "reliability"], ["--load-rounds LOAD_ROUNDS rounds of the load test", "(default: 3)"]),
    (["serverless", "start"], ["(default: 9001)", "stays warm (default: 300.0)",
                               "endpoint.json (default: {state_dir};"]),
    (["serverless", "logs"], ["how many of the last lines (default: 50)"]),
    (["model", "tiny"], ["output directory (default: .cache/tiny-model)", "initialisation seed (default: 0)"]),
    (["mux", "run"], ["seconds between status prints (default: 15.0)"]),
    (["mux", "cancel"], ["name the job's name, as `mux status` lists it"]),
])
def test_help_says_the_defaults(argv, says, capsys):
    from serverless.cli import DEFAULT_STATE_DIR  # the environment's, else .cache/serverless

    text = _help(capsys, *argv)
    for part in says:
        assert part.format(state_dir=DEFAULT_STATE_DIR) in text, text
