"""vLLM's start-up warnings that say nothing to act on, kept out of a run's output.

On CPU every engine start printed about 20 lines per engine (its own process,
its engine core and its worker each warn again): eager mode chosen on purpose,
Triton without a CPU backend, tcmalloc not preloaded, raw prompts deprecated,
no tokenizer (token in, token out), and a progress bar of weight loading.
Each is expected here, and together they hid the first lines of the run that
mattered. The engine core and its workers are processes of their own, which
configure vLLM's logging when they import it, so the filter travels as a
logging config file named by VLLM_LOGGING_CONFIG_PATH, set before vLLM is
imported: the file is vLLM's own default configuration plus this filter.
Every other warning still shows. A user who sets VLLM_LOGGING_CONFIG_PATH,
or asks for more with VLLM_LOGGING_LEVEL=INFO or DEBUG, gets vLLM's output
unfiltered.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

# Substrings of messages that are expected on the paths this project takes.
EXPECTED_NOISE = (
    "Enforce eager set",  # engine.enforce_eager on CPU: chosen, no torch.compile start-up
    "Inductor compilation was disabled",  # follows from eager mode
    "Triton is not installed",  # vLLM's CPU build runs without triton-cpu
    "doesn't include CPU backend",  # the same, from the triton import check
    "Model Runner V2 requires Triton",
    "Reset SSM cache type",  # hybrid-model cache setting, no SSM layers in the models used here
    "is not found in LD_PRELOAD",  # tcmalloc / iomp: optional allocator speed-ups
    "Passing raw prompts to InputProcessor is deprecated",
    "Using None for EOS token id because tokenizer is not initialized",  # token ids in and out
    # At shutdown the engine core is usually still in its exit-time GC when vLLM's
    # 5 s grace ends, so the kill is the usual end (VLLMEngine.shutdown).
    "force killing remaining process",
)
_FORMAT = ("(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s "
           "[%(fileinfo)s:%(lineno)d] %(message)s")


class ExpectedNoise(logging.Filter):
    """Drops the records whose message holds one of EXPECTED_NOISE."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is shown as vLLM would
            return True
        return not any(s in msg for s in EXPECTED_NOISE)


def logging_config(level: str) -> dict:
    """vLLM's default logging configuration (vllm/logger.py) with `ExpectedNoise` on its handler."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": "%m-%d %H:%M:%S",
                                "format": _FORMAT}},
        "filters": {"expected_noise": {"()": f"{__name__}.ExpectedNoise"}},
        "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": level,
                              "stream": os.environ.get("VLLM_LOGGING_STREAM", "ext://sys.stdout"),
                              "filters": ["expected_noise"]}},
        "loggers": {"vllm": {"handlers": ["vllm"], "level": level, "propagate": False}},
    }


def _config_dir() -> Path:
    """This user's own folder under the temp dir: another user's file there cannot be replaced."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"roll-agentic-{uid}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def quiet_expected_warnings() -> None:
    """Points vLLM (this process and those it starts) at the filtered config, unless the user chose."""
    level = os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper()
    if level in ("DEBUG", "INFO") or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        return  # more asked for, or vLLM's logging set up by the user (vLLM refuses a config file then)
    folder = _config_dir()
    chosen = os.environ.get("VLLM_LOGGING_CONFIG_PATH")
    if chosen and Path(chosen).parent != folder:
        return  # the user's own file
    # The Triton check warns while vLLM's logging is still being set up (its
    # record reaches Python's last-resort handler), so its logger is filtered
    # itself; processes forked from this one inherit that.
    triton = logging.getLogger("vllm.triton_utils.importing")
    if not any(isinstance(f, ExpectedNoise) for f in triton.filters):
        triton.addFilter(ExpectedNoise())
    # The engine's process and those vLLM starts read it; written whole, then renamed,
    # each time (engines start at once; a temp cleaner may have removed the last one).
    with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as f:
        json.dump(logging_config(level), f)
    path = folder / f"vllm-logging-{level.lower()}.json"
    os.replace(f.name, path)
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(path)
