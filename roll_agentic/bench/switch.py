"""bench switch: RollMux's warm job switch (host memory) vs a cold one (checkpoint), one trainer slot.

Two jobs of the same model share one `TrainerSlot` (mux/trainer_slot.py),
as co-located jobs share a training node. Each switch copies the outgoing
job's weights and AdamW state out and brings the incoming job's in:
- warm: both jobs resident (RollMux's residency): out is a copy from the
  device into the job's preallocated host buffers (page-locked beside a
  GPU), in a copy from the incoming job's host buffers into the tensors the
  device already holds;
- cold: no job resident: in is its last checkpoint read from storage (page
  cache dropped first, where the OS allows), deserialised and loaded into a
  rebuilt optimizer. The outgoing job's checkpoint write is not counted,
  which favours cold.
Every round trains each job one step between switches, so each switch moves
state that changed. `cold_over_warm` = median cold switch-in / median warm
switch (out + in).

With `--lora-rank R` (16 by default; 0: off) the warm rounds run again with
two LoRA jobs of that rank on the same model: their resident state is their
adapters and moments only, the frozen base staying on the device, so
`full_over_lora_warm` = median full warm switch / median LoRA warm switch,
and `state_full_over_lora` the resident bytes per job of each. Then twice
more with LoRA jobs of two forms (ranks R and 2R): once as the multiplexer
runs them, each form's trainer parked in host memory between its turns
(`lora_form_switch_s`), once with nothing parked, each switch building the
incoming form's trainer from storage as before parking existed
(`lora_form_rebuilt_s`; `rebuilt_over_parked`).

The model is a Qwen2 of random weights and the size
asked for, built on the spot: nothing is downloaded. No Ray here, so it also
runs where only torch and transformers are installed.
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
class SwitchBenchConfig:
    device: str = "cpu"
    hidden: int = 512
    layers: int = 8
    vocab: int = 4096
    rounds: int = 4
    seed: int = 0
    lora_rank: int = 16  # 0: no LoRA rounds


# The least each flag can be, checked by argparse and again for a config built in code. One round
# gives no warm switch (each job's first is fresh) and then no median; the samples draw token ids
# from 2 up, 0 and 1 being pad/bos and eos (random_model.py), so a vocab of 2 fails in torch.randint.
# Below 3 nothing fails: a small vocab only shrinks the embedding, the switched state being set by
# --hidden and --layers (the 64 required before was not needed).
MIN_ROUNDS = 2
MIN_VOCAB = 3


def _validate(cfg: SwitchBenchConfig) -> None:
    check_model_options("switch", cfg.device, cfg.hidden)
    if cfg.layers < 1 or cfg.rounds < MIN_ROUNDS or cfg.vocab < MIN_VOCAB or cfg.lora_rank < 0:
        raise SystemExit(f"bench switch: --layers >= 1, --rounds >= {MIN_ROUNDS}, --vocab >= {MIN_VOCAB} and "
                         "--lora-rank >= 0")


def _samples(vocab: int, seed: int):
    from roll_agentic.train.trainer import Sample

    g = torch.Generator().manual_seed(seed)
    return [Sample(torch.randint(2, vocab, (32,), generator=g).tolist(), [0] * 16 + [1] * 16, [-1.0] * 32,
                   1.0 if i % 2 else -1.0) for i in range(4)]


def _slot(model: Path, ckpts: Path, cfg: SwitchBenchConfig, resident: bool, ranks: tuple[int, int] = (0, 0)):
    from roll_agentic.config import AlgoConfig, TrainerConfig
    from roll_agentic.mux.trainer_slot import TrainerSlot

    slot = TrainerSlot("bench", budget_bytes=1 << 50, threads=torch.get_num_threads())
    for job, rank in zip(("a", "b"), ranks, strict=True):
        trainer = TrainerConfig(lr=1e-4, device=cfg.device, seed=cfg.seed, lora_rank=rank)
        slot.register(job, str(model), trainer, AlgoConfig(), 1.0, str(ckpts / job))
        if resident:
            slot.reserve(job, 1 << 45)
    return slot


def _rounds(slot, cfg: SwitchBenchConfig, log, park: bool = True) -> list:
    """Each job trains one step per round, the two taking turns; `park=False`: no trainer of
    another form is kept between turns (each is built again from storage)."""
    records = []
    for r in range(cfg.rounds):
        for i, job in enumerate(("a", "b")):
            if not park:
                slot.parked.clear()
            sync_device(cfg.device)
            rec = slot.switch_in(job)
            sync_device(cfg.device)
            records.append(rec)
            slot.train(job, _samples(cfg.vocab, 2 * r + i))
            log(f"round {r} {job}: {rec.kind} in {rec.in_s:.3f} s, out {rec.out_s:.3f} s")
    return records


def _median_switch(records: list) -> float:
    """Median switch time, out and in, of `records`."""
    return statistics.median(r.in_s + r.out_s for r in records)


def run_bench(cfg: SwitchBenchConfig, log=lambda m: None) -> dict:
    _validate(cfg)
    with tempfile.TemporaryDirectory(prefix="bench-switch-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        params = build_random_model(root / "model", cfg.hidden, cfg.layers, cfg.vocab, cfg.seed)
        log(f"model: {params / 1e6:.1f} M parameters, built in {time.perf_counter() - t0:.1f} s")

        warm_slot = _slot(root / "model", root / "ckpt", cfg, resident=True)
        warm = [r for r in _rounds(warm_slot, cfg, log) if r.kind == "warm"]
        state_bytes = warm_slot.store.get("a").nbytes
        for job in ("a", "b"):  # what the cold slot reads back
            warm_slot.checkpoint(job, version=cfg.rounds, run_state={}, keep=1)
        del warm_slot
        if cfg.device.startswith("cuda"):
            torch.cuda.empty_cache()
        lora: dict = {}
        if cfg.lora_rank:
            rank = cfg.lora_rank
            lora_slot = _slot(root / "model", root / "ckpt-lora", cfg, resident=True, ranks=(rank, rank))
            lora_warm = [r for r in _rounds(lora_slot, cfg, log) if r.kind == "warm"]
            lora = {"bytes": lora_slot.store.get("a").nbytes, "s": _median_switch(lora_warm)}
            del lora_slot
            forms = (rank, 2 * rank)
            parked = _rounds(_slot(root / "model", root / "ckpt-forms", cfg, True, forms), cfg, log)
            rebuilt = _rounds(_slot(root / "model", root / "ckpt-rebuilt", cfg, True, forms), cfg, log, park=False)
            lora["forms"] = _median_switch([r for r in parked if r.kind == "warm"])
            lora["rebuilt"] = _median_switch([r for r in rebuilt if r.kind == "rebuilt"])

        cold_slot = _slot(root / "model", root / "ckpt", cfg, resident=False)
        cold = [r for r in _rounds(cold_slot, cfg, log)[1:] if r.kind == "cold"]  # [0] also builds the trainer
        on_device = sum(p.numel() * p.element_size() for p in cold_slot.trainer.model.parameters())

    warm_s = statistics.median(r.in_s + r.out_s for r in warm)
    warm_in = statistics.median(r.in_s for r in warm)
    cold_in = statistics.median(r.in_s for r in cold)
    gpu = torch.cuda.get_device_name(0) if cfg.device.startswith("cuda") else ""
    if lora:
        lora = {"lora_rank": cfg.lora_rank, "lora_state_mb_per_job": round(lora["bytes"] / 1e6, 3),
                "lora_warm_switch_s": round(lora["s"], 4), "full_over_lora_warm": round(warm_s / lora["s"], 2),
                "state_full_over_lora": round(state_bytes / lora["bytes"], 1),
                "lora_form_switch_s": round(lora["forms"], 4), "lora_form_rebuilt_s": round(lora["rebuilt"], 4),
                "rebuilt_over_parked": round(lora["rebuilt"] / lora["forms"], 2)}
    return {
        "device": cfg.device, "gpu": gpu, "params_m": round(params / 1e6, 1),
        "state_mb_per_job": round(state_bytes / 1e6, 2), "weights_mb": round(on_device / 1e6, 2),
        "warm_switches": len(warm), "cold_switches": len(cold),
        "warm_switch_s": round(warm_s, 4), "warm_in_s": round(warm_in, 4),
        "warm_out_s": round(statistics.median(r.out_s for r in warm), 4),
        "warm_in_gb_s": round(state_bytes / 1e9 / warm_in, 2),
        "cold_switch_s": round(cold_in, 4),
        "cold_over_warm": round(cold_in / warm_s, 2),
        **lora,
    }


def _run(args: argparse.Namespace) -> int:
    cfg = SwitchBenchConfig(device=args.device, hidden=args.hidden, layers=args.layers, vocab=args.vocab,
                            rounds=args.rounds, seed=args.seed, lora_rank=args.lora_rank)
    out = run_bench(cfg, log=(lambda *_: None) if args.json else (lambda m: print(m, file=sys.stderr)))
    print_result(out)
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the `switch` benchmark to the `bench` command's subparsers."""
    # conflict_handler="resolve": --vocab is declared again below, with this benchmark's lower bound
    # in place of the shared options' at_least(1), so argparse refuses a vocab it cannot run.
    p = subparsers.add_parser("switch", help="RollMux job switch on one trainer: warm (host memory) vs cold (checkpoint)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              conflict_handler="resolve")
    d = SwitchBenchConfig()
    add_model_options(p, d)
    p.add_argument("--vocab", type=at_least(MIN_VOCAB), default=d.vocab,
                   help=f"vocabulary size, at least {MIN_VOCAB} (default: %(default)s)")
    p.add_argument("--rounds", type=at_least(MIN_ROUNDS), default=d.rounds,
                   help=f"rounds of two switches each, at least {MIN_ROUNDS} (default: %(default)s)")
    p.add_argument("--lora-rank", type=at_least(0), default=d.lora_rank,
                   help="also switch two LoRA jobs of this rank warm, adapters only resident; 0: skip (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.set_defaults(func=_run)
    return p


def main(argv: list[str] | None = None) -> int:
    return standalone_main("switch", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
