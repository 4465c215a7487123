"""Shared fixtures: the tiny model (built once per session) and loopback-only Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every server a test starts stays on loopback; Ray needs this before it starts.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_as_in_a_terminal():
    """Tests of Ctrl-C send SIGINT to themselves or to runs they start. A suite started in
    the background of a non-interactive shell inherits SIGINT ignored (so do the runs it
    starts), and those tests then tested nothing: Ctrl-C is restored as a terminal has it."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from roll_agentic.model.tiny import ensure_tiny_model

    return str(ensure_tiny_model(REPO / ".cache" / "tiny-model"))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)
