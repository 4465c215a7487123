"""Reading a JSON or YAML file handed to the simulator, and listing what is wrong with it in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def read_doc(
    path: str | Path, what: str, loads: Callable[[str], object], bad: type[Exception], fmt: str
) -> object:
    """`loads` of the file's text; ValueError `cannot read <what> PATH` or `<what> PATH is not <fmt>`."""
    try:
        return loads(Path(path).read_text())
    except OSError as err:
        raise ValueError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except bad as err:
        raise ValueError(f"{what} {path} is not {fmt}: {_one_line(err)}") from None


def _one_line(err: Exception) -> str:
    """A parser's message in one line: PyYAML's quote the text with a caret under it, over lines."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(err).split())


def listed_problems(problems: list[str], most: int = 10) -> str:
    """Problems in one line: how many, the first `most`, and how many more."""
    shown = "; ".join(problems[:most])
    more = len(problems) - most
    return f"{len(problems)} problem(s): {shown}" + (f"; and {more} more" if more > 0 else "")
