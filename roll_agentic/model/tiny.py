"""A tiny causal LM and tokenizer made on the spot, so nothing is downloaded.

Qwen2 architecture (so vLLM can serve it) with head_dim 64, the smallest head
size vLLM's CPU attention supports. The tokenizer is a byte-level BPE trained
on text the shipped tasks produce, so their words are single tokens while any
other text still encodes (bytes as a fallback).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from roll_agentic.model.chat_format import END, PAD, SPECIAL_TOKENS

TINY_VERSION = 2  # bump when the recipe changes; an older tiny dir is rebuilt


def _task_corpus(samples: int = 400, seed: int = 0) -> list[str]:
    """Observations and replies of the shipped tasks under random play."""
    from envs.frozenlake import MOVES, FrozenLakeText
    from envs.guess_number import GuessNumber

    rng = random.Random(seed)
    texts: list[str] = []
    for i in range(samples):
        env = FrozenLakeText(size=rng.choice([3, 4]), random_map=rng.random() < 0.5)
        obs, _ = env.reset(seed=i)
        texts.append(obs)
        for _ in range(4):
            move = rng.choice(MOVES)
            texts.append(move)
            obs, _, done, _, _ = env.step(move)
            texts.append(obs)
            if done:
                break
        game = GuessNumber(low=1, high=rng.choice([8, 16, 100]))
        texts.append(game.reset(seed=i)[0])
        for _ in range(3):
            guess = str(rng.randint(game.low, game.high))
            texts.append(guess)
            texts.append(game.step(guess)[0])
    words = ("the a an is you are at to of and or with in on answer reply move choose "
             "left right up down north south east west pickup dropoff stick hit yes no "
             "higher lower wrong right invalid action number row col guess again reach goal").split()
    texts += [" ".join(rng.sample(words, 6)) for _ in range(200)]
    texts += [" ".join(str(n) for n in range(k, k + 20)) for k in range(0, 200, 20)]
    return texts


def build_tokenizer(vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_task_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=END,
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (PAD, END)])


def build_tiny_model(out_dir: str | Path, seed: int = 0, hidden_size: int = 128, num_layers: int = 2) -> Path:
    """Writes a Hugging Face checkpoint (config, safetensors, tokenizer) to out_dir."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    vocab = (len(tokenizer) + 63) // 64 * 64  # padded for kernels that like multiples of 64
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden_size, intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=hidden_size // 64, num_key_value_heads=1,
        head_dim=64, max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    from transformers.utils import logging as hf_logging

    # A one-shard model of a few MB: its "Writing model shards" bar was all `make setup` printed.
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out, safe_serialization=True)
    finally:
        if shown:  # as it was (enabling bars that HF_HUB_DISABLE_PROGRESS_BARS hides warned)
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(out)
    (out / "roll_agentic_tiny.json").write_text(json.dumps({"version": TINY_VERSION, "seed": seed}))
    return out


class TinyDirError(OSError):
    """The tiny model's folder cannot be (re)built there: an OSError, so that the callers that report
    an unwritable folder report this one too."""


def _check_tiny_name(out: Path) -> None:
    if not out.name or out.name == "..":  # "", ".", "/": `out.tmp` has no name to take
        raise TinyDirError(f"{str(out)!r} names no folder of its own: choose a new or empty folder for "
                           "the tiny model (e.g. .cache/tiny-model)")


def _check_tiny_dir(out: Path, marker: Path) -> None:
    """Refuses a folder the rebuild would wipe that is not ours: only an absent or empty folder, or
    one holding the marker (an older tiny model), is replaced."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and not out.is_symlink() and (marker.exists() or not any(out.iterdir())):
        return
    raise TinyDirError(f"{out} exists and is not a tiny model folder: choose a new or empty folder "
                       "(nothing was deleted)")


def ensure_tiny_model(out_dir: str | Path, seed: int | None = None) -> Path:
    """Builds the tiny model unless an up-to-date one (of `seed`, if given) is already there.
    Only an absent or empty folder, or an older tiny model's, is (re)built: any other is refused."""
    out = Path(out_dir)
    marker = out / "roll_agentic_tiny.json"
    _check_tiny_name(out)
    try:
        made = json.loads(marker.read_text()) if marker.exists() else {}
    except (OSError, ValueError):  # a torn or foreign marker: rebuild
        made = {}
    if isinstance(made, dict) and made.get("version") == TINY_VERSION and seed in (None, made.get("seed")):
        return out
    _check_tiny_dir(out, marker)
    tmp = out.with_name(out.name + ".tmp")
    build_tiny_model(tmp, seed=0 if seed is None else seed)
    if out.exists():
        import shutil
        shutil.rmtree(out)
    tmp.rename(out)  # atomic: a half-built model is never mistaken for a finished one
    return out


__all__ = ["build_tiny_model", "build_tokenizer", "ensure_tiny_model", "END", "TinyDirError"]
