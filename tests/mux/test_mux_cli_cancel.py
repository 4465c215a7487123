"""`mux cancel --config` with a file it cannot read: one line, like submit and status."""

from __future__ import annotations

import pytest

from roll_agentic.cli import main


@pytest.mark.parametrize(("text", "message"), [(None, "cannot read"), ("name: [x\n", "is not valid YAML")])
def test_mux_cancel_with_a_missing_or_bad_config_is_one_line_not_a_traceback(monkeypatch, tmp_path, capsys,
                                                                           text, message):
    def never(*_a, **_k):
        raise AssertionError("cancel went on to connect")

    monkeypatch.setattr("roll_agentic.mux.session.connect", never)
    conf = tmp_path / "mux.yaml"
    if text is not None:
        conf.write_text(text)
    assert main(["mux", "cancel", "a", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and str(conf) in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_mux_cancel_says_which_step_the_cancelled_job_was_saved_at(monkeypatch, tmp_path, capsys):
    """A cancel checkpoints the job's newest finished step (`Multiplexer.cancel`): the line says so."""
    from types import SimpleNamespace

    reason = "cancelled; its newest checkpoint: step 3"
    mux = SimpleNamespace(cancel=SimpleNamespace(remote=lambda name: True),
                          status=SimpleNamespace(remote=lambda: {"jobs": [{"name": "a", "reason": reason}]}))
    monkeypatch.setattr("roll_agentic.mux.session.connect", lambda path: mux)
    monkeypatch.setattr("ray.get", lambda value, **_k: value)  # the stand-in answers at once
    assert main(["mux", "cancel", "a", "--address-file", str(tmp_path / "none.json")]) == 0
    assert capsys.readouterr().out == f"a: {reason}\n"
