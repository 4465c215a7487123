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
