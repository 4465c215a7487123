"""Building a task's environment from configuration alone.

`env_id` is either a registered gymnasium id (`CliffWalking-v1`) or an entry
point `module:Class`; `module:EnvId` (gymnasium's own form) imports `module`, which
registers `EnvId`, and makes it. Text envs are used as they are; envs with a Discrete
action space are wrapped in `DiscreteTextAdapter`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from envs.adapter import DiscreteTextAdapter


class EnvSpecError(ValueError):
    """The env of a task cannot be built; the message says why and what to do."""


def _is_text_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Text)


def _load_entry_point(env_id: str) -> Callable[..., Any]:
    """What builds the env of `module:Class` (called with the task's env_kwargs)."""
    module_name, _, attr = env_id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        if isinstance(err, ModuleNotFoundError) and _is_self_or_parent(err.name, module_name):
            raise EnvSpecError(f"env_id {env_id!r}: cannot import module {module_name!r} ({err}); run from the "
                               "folder that holds it, or add that folder to PYTHONPATH") from err
        # The module was found; its own import of another one failed. The path hint above sent
        # its author looking for their own module, which was never missing.
        if isinstance(err, ModuleNotFoundError) and err.name:
            raise EnvSpecError(f"env_id {env_id!r}: module {module_name!r} imports {err.name!r}, which is not "
                               "installed: install it in the environment the run uses") from err
        raise EnvSpecError(f"env_id {env_id!r}: importing module {module_name!r} raised "
                           f"{type(err).__name__}: {err}") from err
    except SyntaxError as err:  # said before as "constructing ... raised SyntaxError", as if __init__ were wrong
        raise EnvSpecError(f"env_id {env_id!r}: module {module_name!r} does not parse: {err.msg} "
                           f"({err.filename}, line {err.lineno})") from err
    except Exception as err:  # noqa: BLE001 - its top-level code failed: named as such
        raise EnvSpecError(f"env_id {env_id!r}: importing module {module_name!r} raised "
                           f"{type(err).__name__}: {err}") from err
    cls = getattr(module, attr, None)
    if cls is None and attr in gym.registry:
        # `my_pkg:MyReg-v0`, as gym.make reads it: my_pkg registers MyReg-v0 on import. Read
        # as a class name, it failed with "has no attribute", and the bare id fails in a fresh
        # process (worker, `env check`), where nothing has imported my_pkg.
        return functools.partial(_make_registered, attr)
    if cls is None:
        raise EnvSpecError(f"env_id {env_id!r}: module {module_name!r} has no attribute {attr!r}")
    return cls


def _is_self_or_parent(missing: str | None, module_name: str) -> bool:
    """Whether the module that could not be found is `module_name` or a package above it
    (`my_pkg` of `my_pkg.env`); None (an ImportError that names no module) counts as it."""
    return missing is None or missing == module_name or module_name.startswith(f"{missing}.")


def _env_classes(module_name: str) -> list[str]:
    """The gym.Env subclasses defined in `module_name`, if it is an importable module."""
    try:
        if importlib.util.find_spec(module_name) is None:
            return []
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - not a module of the user's: no hint
        return []
    return [name for name, obj in vars(module).items()
            if inspect.isclass(obj) and issubclass(obj, gym.Env) and obj.__module__ == module.__name__]


def _make_registered(gym_id: str, **kwargs: Any) -> gym.Env:
    env = gym.make(gym_id, **kwargs)
    # An ansi render is the most readable text of a state; envs without
    # one get their observation dumped by the adapter instead.
    if "render_mode" not in kwargs and "ansi" in env.metadata.get("render_modes", []):
        env.close()
        env = gym.make(gym_id, render_mode="ansi", **kwargs)
    return env


def make_text_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """A text env for `env_id`, or EnvSpecError with a message a newcomer can act on."""
    kwargs = dict(env_kwargs or {})
    try:
        if ":" in env_id:
            env = _load_entry_point(env_id)(**kwargs)
        else:
            if env_id not in gym.registry:
                close = [k for k in gym.registry if k.lower().startswith(env_id.split("-")[0].lower())]
                hint = f" Did you mean {' or '.join(close[:3])}?" if close else ""
                classes = _env_classes(env_id) if not close else []
                if classes:  # `my_task.env`: a module, its class left out
                    hint = f" It is a module: name its class, e.g. {env_id}:{classes[0]}."
                else:  # an id the user's package registers: nothing imports that package here
                    hint += (" If a package of yours registers it, import the module that registers it: "
                             f"`my_pkg:{env_id}`.")
                raise EnvSpecError(f"env_id {env_id!r} is not a registered gymnasium id.{hint} "
                                   "Use a registered id or `module:Class`.")
            env = _make_registered(env_id, **kwargs)
    except EnvSpecError:
        raise
    except (TypeError, gym.error.Error) as err:
        raise EnvSpecError(f"env_id {env_id!r}: cannot build it with env_kwargs {kwargs} ({err})") from err
    # A class that declares no spaces failed below with "constructing ... raised
    # AttributeError", as if its constructor were broken.
    missing = [n for n in ("observation_space", "action_space") if not hasattr(env, n)]
    if missing:
        raise EnvSpecError(f"env_id {env_id!r} declares no {' and no '.join(missing)}; set them in __init__, "
                           "e.g. self.observation_space = self.action_space = gymnasium.spaces.Text(4096) "
                           "for a text env")
    if _is_text_space(env.observation_space) and _is_text_space(env.action_space):
        return env
    if isinstance(env.action_space, gym.spaces.Discrete):
        return DiscreteTextAdapter(env)
    if _is_text_space(env.action_space):  # the message below blamed the (text) action space
        raise EnvSpecError(
            f"env_id {env_id!r} has text actions but observation space {env.observation_space}; a text env "
            "declares observation_space = gymnasium.spaces.Text(...) and returns str observations")
    raise EnvSpecError(
        f"env_id {env_id!r} has action space {env.action_space}; roll-agentic speaks text, so it "
        "needs text actions or a Discrete action space it can name")
