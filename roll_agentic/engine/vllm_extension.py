"""Worker-side half of a weight sync: runs inside vLLM's worker process.

vLLM mixes this class into its worker (`worker_extension_cls`), and the
engine reaches it with `collective_rpc("reload_weights_from_file", ...)`.
Why a file and not tensors: RPC arguments are serialised, and tensors arrive
as lists; a safetensors file in /dev/shm is one memory copy and works on every
platform. Why `reload_weights` and not `model.load_weights`: on CPU vLLM
pre-packs linear weights and leaves `layer.weight` empty, so only the
layerwise-reload path (restore checkpoint layout, load, re-process in place)
accepts checkpoint-format tensors after start-up.

Method names must not clash with the worker's own (vLLM refuses the mix-in;
the worker already has `update_weights` and `reload_weights`).
"""

from __future__ import annotations

import glob
import logging
import os
import time
from typing import Any

_TIED_HEAD = "lm_head.weight"
_EMBED = "model.embed_tokens.weight"
# Layers whose tensors are computed at start-up, never read from a checkpoint.
# vLLM's layerwise reload warns "<layer>: Failed to load weights" for each of
# them on every reload, then restores them as they were, which is right; the
# warning, once per sync in the run's log, reads like a broken sync.
_DERIVED_LAYERS = frozenset({"RotaryEmbedding"})
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def refusal_prefix(path: str) -> str:
    """How the worker's refusal of the file at `path` begins (names or shapes not the model's,
    found before any weight changed): the engine tells it from a reload failed half way by it."""
    return f"reload_weights_from_file({path}): "


class DerivedLayerReloadFilter(logging.Filter):
    """Drops vLLM's reload warning for layers with no checkpoint tensors; keeps every other record."""

    def filter(self, record: logging.LogRecord) -> bool:
        derived = bool(record.args) and record.args[0] in _DERIVED_LAYERS  # type: ignore[index]
        return not (derived and record.msg == "%s: Failed to load weights")


def _quiet_derived_layer_warnings() -> None:
    log = logging.getLogger(_RELOAD_LOGGER)
    if not any(isinstance(f, DerivedLayerReloadFilter) for f in log.filters):
        log.addFilter(DerivedLayerReloadFilter())


def _file_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a safetensors file, read from its header (no data loaded)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


class WeightReloadExtension:
    """Mixed into vLLM's worker; `self` is the worker (model_runner, vllm_config)."""

    model_runner: Any
    vllm_config: Any

    def _roll_expected_names(self) -> set[str] | None:
        """Parameter names of the checkpoint being served, read once from its files.

        A reload that silently misses a tensor would keep the old values for it
        (vLLM falls back to the previous kernel tensors), so the trainer's file is
        checked against these names instead.
        """
        cached = getattr(self, "_roll_names", None)
        if cached is not None:
            return cached or None
        model_dir = str(self.vllm_config.model_config.model)
        files = sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
        shapes: dict[str, tuple[int, ...]] = {}
        for f in files:
            shapes.update(_file_shapes(f))
        self._roll_shapes = shapes
        names = set(shapes)
        self._roll_names = names - {_TIED_HEAD} if self._roll_tied() else names
        return self._roll_names or None

    def _roll_tied(self) -> bool:
        hf = self.vllm_config.model_config.hf_config
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
        return bool(getattr(text, "tie_word_embeddings", False))

    def reload_weights_from_file(self, path: str) -> dict[str, float]:
        """Loads HF-named tensors from a safetensors file into the running model.

        `lm_head.weight` may be present or absent when the head is tied to the
        embeddings (transformers' state_dict carries it, save_pretrained drops
        it); it is ignored then, since the embedding already defines it.
        """
        from safetensors.torch import load_file
        from vllm.config import set_current_vllm_config

        t0 = time.perf_counter()
        _quiet_derived_layer_warnings()
        state = load_file(path)  # CPU tensors; the weight loaders copy to the model's device
        tied = self._roll_tied()
        if tied:
            state.pop(_TIED_HEAD, None)
        expected = self._roll_expected_names()
        if expected is not None:
            missing = sorted(expected - state.keys())
            unexpected = sorted(state.keys() - expected)
            if missing or unexpected:
                raise ValueError(f"{refusal_prefix(path)}missing {missing[:3]} "
                                 f"({len(missing)}), unexpected {unexpected[:3]} ({len(unexpected)})")
            # A wrong shape fails inside the layerwise reload, after it took the model's
            # tensors apart: the worker then failed and took the engine core down with it.
            wrong = [f"{k} {tuple(v.shape)} (model: {self._roll_shapes[k]})" for k, v in sorted(state.items())
                     if tuple(v.shape) != self._roll_shapes[k]]
            if wrong:
                raise ValueError(f"{refusal_prefix(path)}wrong shape for {len(wrong)} "
                                 f"tensor(s): {wrong[:3]}")
        if tied and _EMBED in state:
            # The tied head is its own layer in vLLM: layerwise reload only re-processes
            # layers that receive a tensor, and on CPU the head keeps a pre-packed copy
            # of the weight for its GEMM. Without this it would keep the old embedding.
            state[_TIED_HEAD] = state[_EMBED]
        with set_current_vllm_config(self.vllm_config):
            self.model_runner.reload_weights(weights_iterator=iter(state.items()))
        return {"tensors": float(len(state)), "seconds": time.perf_counter() - t0}
