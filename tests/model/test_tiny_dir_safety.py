"""`ensure_tiny_model` replaces only its own folder: never a user's folder it was pointed at."""

from __future__ import annotations

import json

import pytest

from roll_agentic.cli import main
from roll_agentic.model import tiny
from roll_agentic.model.tiny import TinyDirError, ensure_tiny_model


@pytest.fixture
def fake_build(monkeypatch):
    """A stand-in for the real build: the folder logic is what is tested, not the model."""
    def build(out, seed=0, **_):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        (out / "roll_agentic_tiny.json").write_text(json.dumps({"version": tiny.TINY_VERSION, "seed": seed}))
        return out
    monkeypatch.setattr(tiny, "build_tiny_model", build)


def test_a_folder_with_user_files_survives(tmp_path, fake_build):
    out = tmp_path / "outputs"
    out.mkdir()
    (out / "my_run.txt").write_text("precious")
    with pytest.raises(TinyDirError, match="exists and is not a tiny model folder.*nothing was deleted"):
        ensure_tiny_model(out)
    assert (out / "my_run.txt").read_text() == "precious"
    assert not (tmp_path / "outputs.tmp").exists()


def test_a_file_in_its_place_survives(tmp_path, fake_build):
    out = tmp_path / "notes"
    out.write_text("precious")
    with pytest.raises(TinyDirError, match="not a tiny model folder"):
        ensure_tiny_model(out)
    assert out.read_text() == "precious"


@pytest.mark.parametrize("made", ["absent", "empty", "older"])
def test_an_absent_empty_or_older_tiny_folder_is_built(tmp_path, fake_build, made):
    out = tmp_path / "m"
    if made != "absent":
        out.mkdir()
    if made == "older":
        (out / "roll_agentic_tiny.json").write_text(json.dumps({"version": -1, "seed": 0}))
        (out / "stale.bin").write_text("old")
    assert ensure_tiny_model(out, seed=3) == out
    assert json.loads((out / "roll_agentic_tiny.json").read_text())["seed"] == 3
    assert not (out / "stale.bin").exists()


def test_an_up_to_date_model_is_kept(tmp_path, fake_build):
    out = ensure_tiny_model(tmp_path / "m")
    (out / "extra").write_text("x")
    assert ensure_tiny_model(out) == out and (out / "extra").exists()


@pytest.mark.parametrize("name", ["", ".", "/"])
def test_an_empty_name_gets_a_clear_error(name, fake_build):
    with pytest.raises(TinyDirError, match="names no folder of its own"):
        ensure_tiny_model(name)


def test_the_cli_refuses_and_says_why(tmp_path, fake_build, capsys):
    out = tmp_path / "outputs"
    out.mkdir()
    (out / "keep").write_text("x")
    assert main(["model", "tiny", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "not a tiny model folder" in err and "nothing was deleted" in err
    assert (out / "keep").exists()


def test_the_help_says_a_new_or_empty_folder(capsys):
    with pytest.raises(SystemExit):
        main(["model", "tiny", "--help"])
    assert "new or empty folder" in " ".join(capsys.readouterr().out.split())
