"""An error as one line of text, for logs and messages that must not span lines."""

from __future__ import annotations


def error_line(err: BaseException, limit: int | None = None) -> str:
    """`Type: message` with the message's whitespace (newlines included) squeezed to single
    spaces, and the message cut at `limit` characters (None: all of it)."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:limit]}"
