"""A package of reward modules written for one test, importable while it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def write_reward_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                         modules: dict[str, str]) -> str:
    """`name`/<module>.py for each of `modules` (and a `healthy` one scoring 1.0) under tmp_path."""
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for module, source in {**modules, "healthy": "def reward(summary):\n    return 1.0\n"}.items():
        (pkg / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def forget_package(name: str) -> None:
    """Drops the package's modules from sys.modules: the next test imports its own."""
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]
