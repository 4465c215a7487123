"""An env the user registers with gymnasium in their own package, named as gymnasium names it.

A fresh process (a worker, `env check`) has not imported that package, so the bare id
is unknown there; `my_pkg:MyReg-v0` imports it first, as gym.make reads that form.
"""

import sys
import textwrap

import gymnasium as gym
import pytest

from envs.checker import check_env
from envs.registry import EnvSpecError, make_text_env

PKG = "regpkg_roll_agentic"
ENV_ID = "RollAgenticTestReg-v0"

_INIT = textwrap.dedent(f"""
    import gymnasium as gym
    from gymnasium import spaces


    class CountEnv(gym.Env):
        def __init__(self, size=3):
            self.size = size
            self.observation_space = self.action_space = spaces.Text(64)

        def reset(self, *, seed=None, options=None):
            return f"size{{self.size}}", {{}}

        def step(self, action):
            return "done", 0.0, True, False, {{"invalid_action": "up" not in action}}


    gym.register(id="{ENV_ID}", entry_point=CountEnv)
""")


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    (tmp_path / PKG).mkdir()
    (tmp_path / PKG / "__init__.py").write_text(_INIT)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield PKG
    # Left registered, the id would be known to every later test in this process.
    gym.registry.pop(ENV_ID, None)
    for name in [m for m in sys.modules if m == PKG or m.startswith(f"{PKG}.")]:
        del sys.modules[name]


def test_module_colon_registered_id_imports_the_package_and_makes_the_id(user_pkg):
    # was: "module 'regpkg_roll_agentic' has no attribute 'RollAgenticTestReg-v0'"
    env = make_text_env(f"{user_pkg}:{ENV_ID}", {"size": 5})
    obs, _ = env.reset(seed=0)
    assert obs == "size5"
    env.close()


def test_env_check_passes_a_registered_id_named_with_its_package(user_pkg):
    results = check_env(f"{user_pkg}:{ENV_ID}")
    assert all(r.ok for r in results), results


def test_an_unknown_bare_id_says_to_name_the_package_that_registers_it(user_pkg):
    # Nothing has imported the package: the id is not registered in this process.
    with pytest.raises(EnvSpecError, match=rf"import the module that registers it: `my_pkg:{ENV_ID}`"):
        make_text_env(ENV_ID)


def test_a_missing_attribute_that_is_no_registered_id_is_still_named(user_pkg):
    with pytest.raises(EnvSpecError, match=f"module '{PKG}' has no attribute 'NoSuchEnv-v0'"):
        make_text_env(f"{user_pkg}:NoSuchEnv-v0")
