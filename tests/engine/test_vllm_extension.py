"""The worker extension's log filter: only the harmless reload warning of derived layers goes."""

import logging

from roll_agentic.engine import vllm_extension
from roll_agentic.engine.vllm_extension import _RELOAD_LOGGER, _quiet_derived_layer_warnings


def test_reload_warning_of_derived_layers_is_dropped_and_every_other_kept(caplog):
    log = logging.getLogger(_RELOAD_LOGGER)
    before = list(log.filters)
    try:
        _quiet_derived_layer_warnings()
        _quiet_derived_layer_warnings()  # idempotent: one filter per process
        assert sum(isinstance(f, vllm_extension.DerivedLayerReloadFilter) for f in log.filters) == 1
        with caplog.at_level(logging.DEBUG, logger=_RELOAD_LOGGER):
            log.warning("%s: Failed to load weights", "RotaryEmbedding")
            log.warning("%s: Failed to load weights", "QKVParallelLinear")  # a real miss stays loud
            log.debug("%s: Delayed processing", "RotaryEmbedding")
        messages = [r.getMessage() for r in caplog.records]
        assert messages == [
            "QKVParallelLinear: Failed to load weights",
            "RotaryEmbedding: Delayed processing",
        ]
    finally:
        log.filters[:] = before
