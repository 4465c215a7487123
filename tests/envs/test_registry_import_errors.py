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


def test_a_missing_dependency_is_named_as_such_not_as_a_path_problem(user_dir):
    """The module was found; what it imports is not installed. "Run from the folder that
    holds it" sent its author looking for their own module, which was there."""
    (user_dir / "brokenenv").mkdir()
    (user_dir / "brokenenv" / "__init__.py").write_text("")
    (user_dir / "brokenenv" / "needs.py").write_text("import a_simulator_nobody_installed\n")
    with pytest.raises(EnvSpecError) as err:
        make_text_env("brokenenv.needs:E")
    assert str(err.value) == ("env_id 'brokenenv.needs:E': module 'brokenenv.needs' imports "
                              "'a_simulator_nobody_installed', which is not installed: install it in the "
                              "environment the run uses")


@pytest.mark.parametrize("env_id, missing", [("brokenenv.nothere:E", "brokenenv.nothere"),
                                             ("no_such_pkg_here.env:E", "no_such_pkg_here")])
def test_a_module_or_package_that_is_not_there_keeps_the_path_hint(user_dir, env_id, missing):
    (user_dir / "brokenenv").mkdir()
    (user_dir / "brokenenv" / "__init__.py").write_text("")
    with pytest.raises(EnvSpecError, match=f"No module named '{missing}'.*run from the folder that holds it"):
        make_text_env(env_id)


def test_another_import_error_is_named_as_the_import(user_dir):
    (user_dir / "brokenenv").mkdir()
    (user_dir / "brokenenv" / "__init__.py").write_text("")
    (user_dir / "brokenenv" / "wrongname.py").write_text("from json import no_such_name\n")
    with pytest.raises(EnvSpecError, match="importing module 'brokenenv.wrongname' raised ImportError: cannot "
                                           "import name 'no_such_name'"):
        make_text_env("brokenenv.wrongname:E")
