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
