"""An env module that does not import is named as such, not as a constructor that raised."""

import sys

import pytest

from envs.registry import EnvSpecError, make_text_env


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("brokenenv")]:
        del sys.modules[name]


def test_a_syntax_error_is_named_with_its_file_and_line(user_dir):
    (user_dir / "brokenenv").mkdir()
    (user_dir / "brokenenv" / "__init__.py").write_text("")
    (user_dir / "brokenenv" / "syntax.py").write_text("x = 1\nclass E(:\n    pass\n")
    with pytest.raises(EnvSpecError, match=r"module 'brokenenv.syntax' does not parse: .*syntax.py, line 2"):
        make_text_env("brokenenv.syntax:E")


def test_top_level_code_that_raises_is_named_as_the_import(user_dir):
    (user_dir / "brokenenv").mkdir()
    (user_dir / "brokenenv" / "__init__.py").write_text("")
    (user_dir / "brokenenv" / "raises.py").write_text("raise KeyError('CONFIG')\n")
    with pytest.raises(EnvSpecError, match="importing module 'brokenenv.raises' raised KeyError: 'CONFIG'"):
        make_text_env("brokenenv.raises:E")
