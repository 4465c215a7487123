"""bench lora: a LoRA trainer vs a full fine-tune of the same model, on the same batches.

Both train `--steps` PPO steps on the same random batches, one after the
other, on a Qwen2 of random weights and the size asked for (built on the
spot, nothing downloaded). Measured for each: the parameters the optimizer
steps, AdamW's state in bytes (what bounds the model a trainer fits beside
its weights), the median step time, and the time to produce the weights the
engines load (LoRA merges its adapters into them). `lora_merge_max_abs_diff`
checks the merge: the largest logit difference between the LoRA model and a
plain model loaded with the merged weights (0 up to float rounding). No Ray
here, so it also runs where only torch and transformers are installed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from roll_agentic.arg_types import at_least
from roll_agentic.bench.cli import print_result, standalone_main
from roll_agentic.bench.random_model import (
    add_model_options,
    build_random_model,
    check_model_options,
    sync_device,
)


@dataclass
class LoraBenchConfig:
    device: str = "cpu"
    hidden: int = 512
    layers: int = 8
    vocab: int = 4096
    rank: int = 16
    steps: int = 4
    seed: int = 0


# The least each flag can be, checked by argparse (at_least: "argument --vocab: must be at least
# 64, got 2", exit 2) and again, in the same words, for a config built in code. Two steps: the
# median step time leaves out the first, which also allocates AdamW's state.
MINIMA = {"layers": 1, "steps": 2, "vocab": 64, "rank": 1}


def _validate(cfg: LoraBenchConfig) -> None:
    check_model_options("lora", cfg.device, cfg.hidden)
    for field, low in MINIMA.items():
        value = getattr(cfg, field)
        if value < low:
            raise SystemExit(f"bench lora: argument --{field}: must be at least {low}, got {value}")


def _batch(vocab: int, seed: int):
    from roll_agentic.train.trainer import Sample

    g = torch.Generator().manual_seed(seed)
    return [Sample(torch.randint(2, vocab, (64,), generator=g).tolist(), [0] * 16 + [1] * 48, [-1.0] * 64,
                   1.0 if i % 2 else -1.0) for i in range(8)]


def _optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    return sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
               if isinstance(v, torch.Tensor))


def _measure(model: Path, cfg: LoraBenchConfig, rank: int, log) -> tuple[dict, object]:
    from roll_agentic.config import AlgoConfig, TrainerConfig
    from roll_agentic.train.trainer import PolicyTrainer

    tcfg = TrainerConfig(lr=1e-4, device=cfg.device, seed=cfg.seed, micro_batch_size=8, lora_rank=rank)
    trainer = PolicyTrainer(str(model), tcfg, AlgoConfig())
    times = []
    for step in range(cfg.steps):
        sync_device(cfg.device)
        t0 = time.perf_counter()
        trainer.train_step(_batch(cfg.vocab, step))
        sync_device(cfg.device)
        times.append(time.perf_counter() - t0)
        log(f"{'lora' if rank else 'full'} step {step}: {times[-1]:.3f} s")
    t0 = time.perf_counter()
    trainer.engine_state_dict()
    sync_device(cfg.device)
    publish_s = time.perf_counter() - t0
    return {
        "trained_params": sum(p.numel() for p in trainer.trainable()),
        "optimizer_bytes": _optimizer_bytes(trainer.optimizer),
        "step_s": statistics.median(times[1:]),  # the first step also allocates AdamW's state
        "publish_s": publish_s,
    }, trainer


def _merge_error(model: Path, trainer, cfg: LoraBenchConfig) -> float:
    """Largest logit difference between the LoRA model and a plain one given its merged weights."""
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).to(cfg.device).eval()
    plain.load_state_dict(trainer.engine_state_dict(), strict=False)  # a tied lm_head is the embedding
    ids = torch.tensor([_batch(cfg.vocab, 99)[0].token_ids], device=cfg.device)
    with torch.no_grad():
        return float((plain(input_ids=ids).logits - trainer.model(input_ids=ids).logits).abs().max())


def run_bench(cfg: LoraBenchConfig, log=lambda m: None) -> dict:
    _validate(cfg)
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        model = Path(tmp) / "model"
        params = build_random_model(model, cfg.hidden, cfg.layers, cfg.vocab, cfg.seed)
        log(f"model: {params / 1e6:.1f} M parameters")
        full, trainer = _measure(model, cfg, 0, log)
        del trainer
        lora, trainer = _measure(model, cfg, cfg.rank, log)
        merge_error = _merge_error(model, trainer, cfg)
    gpu = torch.cuda.get_device_name(0) if cfg.device.startswith("cuda") else ""
    return {
        "device": cfg.device, "gpu": gpu, "params_m": round(params / 1e6, 2), "lora_rank": cfg.rank,
        "full_trained_params": full["trained_params"], "lora_trained_params": lora["trained_params"],
        "full_optimizer_mb": round(full["optimizer_bytes"] / 1e6, 3),
        "lora_optimizer_mb": round(lora["optimizer_bytes"] / 1e6, 3),
        "optimizer_state_full_over_lora": round(full["optimizer_bytes"] / lora["optimizer_bytes"], 2),
        "full_step_s": round(full["step_s"], 4), "lora_step_s": round(lora["step_s"], 4),
        "step_time_full_over_lora": round(full["step_s"] / lora["step_s"], 3),
        "full_publish_s": round(full["publish_s"], 4), "lora_publish_s": round(lora["publish_s"], 4),
        "lora_merge_max_abs_diff": merge_error,
    }


def _run(args: argparse.Namespace) -> int:
    cfg = LoraBenchConfig(device=args.device, hidden=args.hidden, layers=args.layers, vocab=args.vocab,
                          rank=args.rank, steps=args.steps, seed=args.seed)
    out = run_bench(cfg, log=(lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr)))
    print_result(out)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `lora` benchmark to the `bench` command's subparsers."""
    # conflict_handler="resolve": --layers and --vocab are declared again below, with this benchmark's
    # lower bounds in place of the shared options' at_least(1), so argparse refuses what it cannot run.
    p = subparsers.add_parser("lora", help="LoRA vs full fine-tune: optimizer state, step time, merged weights",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              conflict_handler="resolve")
    d = LoraBenchConfig()
    add_model_options(p, d)
    p.add_argument("--layers", type=at_least(MINIMA["layers"]), default=d.layers,
                   help="decoder layers (default: %(default)s)")
    p.add_argument("--vocab", type=at_least(MINIMA["vocab"]), default=d.vocab,
                   help=f"vocabulary size, at least {MINIMA['vocab']} (default: %(default)s)")
    p.add_argument("--rank", type=at_least(MINIMA["rank"]), default=d.rank, help="LoRA rank (default: %(default)s)")
    p.add_argument("--steps", type=at_least(MINIMA["steps"]), default=d.steps,
                   help=f"training steps of each, at least {MINIMA['steps']} (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=_run)
    return p


def main(argv: list[str] | None = None) -> int:
    return standalone_main("lora", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
