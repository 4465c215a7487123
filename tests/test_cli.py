"""`roll-agentic train` when start-up is interrupted: what it started stops, one line, exit 130."""

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
