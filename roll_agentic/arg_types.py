"""Argument types for command-line flags (`sim`, `bench`): a bad value is one line naming the flag.

Before, `--workers 0` hung, `--repeats 0` and `--steps 0` failed after the
whole measurement on an empty median, and `--window-s -1` printed a "fraction"
of 41. Flags that size a run have an upper bound too (`at_most`): past it a
run does not fail, it runs for hours or fills memory without a word
(`sim scale --jobs 10000000`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(low: int) -> Callable[[str], int]:
    """An integer no smaller than `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def at_most(low: int, high: int, why: str) -> Callable[[str], int]:
    """An integer from `low` to `high`; past `high` the message says `why` the limit is there.

    `why` is for a newcomer who typed an extra zero: what a larger value would
    cost, and what to do instead if they meant it.
    """
    parse_low = at_least(low)

    def parse(text: str) -> int:
        value = parse_low(text)
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}: {why}")
        return value

    return parse


def _number(text: str, ok: Callable[[float], bool], rule: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and ok(value)):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
    return value


def positive(text: str) -> float:
    """A finite number above 0."""
    return _number(text, lambda v: v > 0, "a number above 0")


def non_negative(text: str) -> float:
    """A finite number, 0 or more."""
    return _number(text, lambda v: v >= 0, "a number >= 0")


def json_object(flag: str, text: str) -> dict:
    """`text` as a JSON object ("" is {}); ValueError in one line naming `flag` otherwise
    (`env check --kwargs`, `reward check --kwargs`)."""
    import json

    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag} must be a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text}")
    return value
