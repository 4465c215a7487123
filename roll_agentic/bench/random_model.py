"""What the trainer benchmarks (`bench switch`, `bench lora`) share: a Qwen2 of random weights
and the size asked for, built on the spot (nothing downloaded), and the options that size it.

No Ray here: these benchmarks also run where only torch and transformers are installed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from roll_agentic.arg_types import at_least


def build_random_model(out: Path, hidden: int, layers: int, vocab: int, seed: int) -> int:
    """A Qwen2 checkpoint of random weights; returns its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=1,
                         head_dim=64, max_position_embeddings=512, tie_word_embeddings=True,
                         bos_token_id=0, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def check_model_options(bench: str, device: str, hidden: int) -> None:
    """SystemExit, in one line naming the option, for a device or size the benchmark cannot use."""
    if re.fullmatch(r"cpu|cuda(:\d+)?", device) is None:
        raise SystemExit(f"bench {bench}: --device must be cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"bench {bench}: --device cuda, but torch sees no CUDA device; use --device cpu")
    if hidden < 64 or hidden % 64:
        raise SystemExit(f"bench {bench}: --hidden must be a multiple of 64 (heads of 64), got {hidden}")


def add_model_options(p: argparse.ArgumentParser, defaults) -> None:
    """--device, --hidden, --layers, --vocab and --seed, defaulting to `defaults`' fields."""
    p.add_argument("--device", default=defaults.device, help="trainer device: cpu, cuda or cuda:N (default: %(default)s)")
    p.add_argument("--hidden", type=at_least(1), default=defaults.hidden, help="hidden size, a multiple of 64 (default: %(default)s)")
    p.add_argument("--layers", type=at_least(1), default=defaults.layers, help="decoder layers (default: %(default)s)")
    p.add_argument("--vocab", type=at_least(1), default=defaults.vocab, help="vocabulary size (default: %(default)s)")
    p.add_argument("--seed", type=at_least(0), default=defaults.seed, help="seed of the random weights (default: %(default)s)")


def sync_device(device: str) -> None:
    """Waits for the device's queued work, so that a timer around it measures it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
