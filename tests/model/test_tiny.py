"""The tiny model's build leaves the caller's progress-bar settings as they were."""

from __future__ import annotations

import importlib
import warnings

import pytest
from transformers.utils import logging as hf_logging

from roll_agentic.model.tiny import build_tiny_model

hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module, not its tqdm class


@pytest.mark.parametrize("shown", [True, False])
def test_the_build_hides_its_save_bar_and_puts_the_setting_back(tmp_path, monkeypatch, shown):
    # Hidden: as under HF_HUB_DISABLE_PROGRESS_BARS=1 (the runs' setting), where turning the
    # bars back on after the save warned "Cannot enable progress bars".
    monkeypatch.setattr(hub_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", None if shown else True)
    monkeypatch.setattr(hub_tqdm, "progress_bar_states", {"_global": shown})
    monkeypatch.setattr(hf_logging, "_tqdm_active", shown)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = build_tiny_model(tmp_path / "m", hidden_size=64, num_layers=1)
    assert (out / "config.json").exists()
    assert hf_logging.is_progress_bar_enabled() is shown
