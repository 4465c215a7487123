"""What a task's `reward` names: a module of this repo's `rewards/`, or one of yours.

    reward: frozenlake              # rewards/frozenlake.py
    reward: my_pkg.scoring          # my_pkg/scoring.py, importable from the run's folder

A bare name is a module in the shipped `rewards` package; a dotted name is
any importable module, found the way a task's `env_id` entry point is (the
run's folder is on the path of the run and of every process it starts).
Before this, a reward had to be copied into the installed `rewards/`, so a
user's env and its reward could not live in the user's own package. A
top-level module of the user's (`my_reward.py` in the run's folder) is not a
reward: its bare name already means `rewards/my_reward.py`, so the user is
told to put it in a package (`my_pkg/my_reward.py`, `reward: my_pkg.my_reward`).

Either way the module is deployed as one file (the Lambda zip holds just
that file, whose `handler` is `<file stem>.handler`) and its function is
named `function_prefix + <file stem>`: `roll-agentic-scoring` for
`my_pkg.scoring`, the name `roll-agentic serverless deploy my_pkg/scoring.py`
gives it too. Two tasks whose rewards are different modules with the same
stem would share one function, so the config refuses them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BUILTIN_PACKAGE = "rewards"


class TopLevelModule(FileNotFoundError):
    """A bare reward name that is no module of rewards/ but a top-level module of the user's:
    the message says where to move it, so no "expected rewards/<name>.py" may follow it."""


def module_name(ref: str) -> str:
    """The importable module a task's `reward` names."""
    return ref if "." in ref else f"{BUILTIN_PACKAGE}.{ref}"


def function_stem(ref: str) -> str:
    """The part of the Lambda function's name after the prefix: the module's file stem."""
    return ref.rsplit(".", 1)[-1]


def shown_as(ref: str) -> str:
    """How a message names the module's file: `rewards/x.py`, or `my_pkg/x.py`."""
    return module_name(ref).replace(".", "/") + ".py"


def syntax_problem(ref: object) -> str:
    """Why `ref` cannot name a reward module at all, or "" (checked before anything is imported)."""
    if not isinstance(ref, str) or not ref:
        return "a module name: one in rewards/ (frozenlake) or a dotted path to yours (my_pkg.my_reward)"
    if ref.endswith(".py"):  # `reward: my_reward.py` read as module `py` of package my_reward
        name = ref[:-3].replace("/", ".").removeprefix(f"{BUILTIN_PACKAGE}.")
        return f"a module name, without .py: {name!r}"
    parts = ref.split(".")
    if not all(p.isidentifier() for p in parts):
        return ("a module name made of Python identifiers joined by dots: frozenlake for "
                "rewards/frozenlake.py, my_pkg.my_reward for my_pkg/my_reward.py")
    if len(parts) > 1 and parts[0] == BUILTIN_PACKAGE:
        leaf = parts[-1]
        there = _closest(leaf, BUILTIN_PACKAGE)
        if there and there != leaf:  # `rewards.code_exe`: the prefix and a typo
            return f"{there!r} alone for a module in rewards/ (there is no {leaf!r})"
        return f"{leaf!r} alone for a module in rewards/"
    return ""


def stem_clashes(refs: list[str]) -> list[tuple[str, str]]:
    """Pairs of different rewards that would deploy to one function (same file stem)."""
    by_stem: dict[str, str] = {}
    clashes = []
    for ref in dict.fromkeys(refs):
        first = by_stem.setdefault(function_stem(ref), ref)
        if first != ref:
            clashes.append((first, ref))
    return clashes


def source_file(ref: str) -> Path:
    """The module's file, without importing it; FileNotFoundError saying what is missing."""
    name = module_name(ref)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent that is no package, or is not importable
        spec = None
    if spec is None or not spec.origin or not spec.has_location:
        if "." not in ref:
            top = _top_level_file(ref)
            if top is not None:  # the user's own my_reward.py next to the run, not one in rewards/
                raise TopLevelModule(
                    f"reward {ref!r}: a bare name is a module in rewards/, and there is none of that name; "
                    f"{top} is a top-level module, which a reward cannot be: put it in a package of yours "
                    f"(my_pkg/{ref}.py, with an empty my_pkg/__init__.py) and name it reward: my_pkg.{ref}")
            raise FileNotFoundError(f"reward {ref!r} is not a module in rewards/{_close_one(ref, 'rewards')}")
        package, _, leaf = name.rpartition(".")
        if _has_location(package):  # the package is there: only the module is missing
            raise FileNotFoundError(f"reward {ref!r}: package {package} has no module {leaf}"
                                    f"{_close_one(leaf, package)}")
        raise FileNotFoundError(
            f"reward {ref!r}: no module {name} is importable from the run's folder (run from the "
            "folder that holds its package, or add that folder to PYTHONPATH)")
    path = Path(spec.origin)
    if path.suffix != ".py" or path.name == "__init__.py":
        raise FileNotFoundError(
            f"reward {ref!r}: {path} is not a plain module file; a reward is deployed as one .py file")
    return path


def _top_level_file(name: str) -> Path | None:
    """The file of a top-level module `name` of the user's (not the standard library's), if any.

    Not accepted as the reward: a bare name means rewards/, so `reward: frozenlake` can never
    turn into a stray frozenlake.py of the run's folder (an env's `module:Class` has no such
    ambiguity); said instead of "not a module in rewards/", which sent users to add the file
    to the installed package."""
    if name in sys.stdlib_module_names:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.has_location or not spec.origin or spec.submodule_search_locations is not None:
        return None
    return Path(spec.origin) if spec.origin.endswith(".py") else None


def _has_location(package: str) -> bool:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.submodule_search_locations is not None


def _close_one(leaf: str, package: str) -> str:
    """" (did you mean X?)" for the closest module name in `package`, or ""."""
    close = _closest(leaf, package)
    return f" (did you mean {close}?)" if close else ""


def _closest(leaf: str, package: str) -> str:
    """The module of `package` whose name is closest to `leaf` (itself if there is one), or ""."""
    import difflib
    import pkgutil

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return ""
    if spec is None or spec.submodule_search_locations is None:
        return ""
    names = [m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)]
    close = difflib.get_close_matches(leaf, names, n=1, cutoff=0.6)
    return close[0] if close else ""
