"""Data-parallel training over Ray workers with torch.distributed.

`trainer.num_workers` Ray actors each hold a full `PolicyTrainer` (or, with
`trainer.strategy=fsdp` on GPUs, an FSDP2-sharded one) and a shard of every
batch. Each scales its loss by the whole batch's token count, gradients are
summed across workers (gloo on CPU, NCCL on GPU), and every worker takes the
same optimizer step, so parameters stay identical, bit for bit, without
being broadcast.
"""

from __future__ import annotations

import os
import socket

import ray
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.train.trainer import PolicyTrainer, Sample


def shard_samples(samples: list[Sample], world: int, equal_counts: bool = False) -> list[list[Sample]]:
    """Greedy balance by tokens: the slowest worker sets the step time.

    With `equal_counts` (FSDP) every shard gets the same number of samples,
    topped up with padding samples (no loss, no token). Under FSDP each
    forward and backward pass is a collective that every rank must join:
    ranks with different numbers of micro-batches would wait on each other
    for ever. Equal counts in every call keep every rank's micro-batches
    (and the samples it carries over to the next call) in step.
    """
    shards: list[list[Sample]] = [[] for _ in range(world)]
    load = [0] * world
    cap = -(-len(samples) // world) if equal_counts else len(samples)
    for s in sorted(samples, key=lambda s: -len(s.token_ids)):
        i = min((r for r in range(world) if len(shards[r]) < cap), key=load.__getitem__)
        shards[i].append(s)
        load[i] += len(s.token_ids)
    if equal_counts and samples:
        like = samples[0].token_ids[:2] if len(samples[0].token_ids) >= 2 else [0, 0]
        for shard in shards:
            # Two tokens: the loss then still runs through the model (times a zero
            # mask), so its backward reaches every parameter's gradient hook.
            shard += [Sample(list(like), [0, 0], [0.0, 0.0], 0.0, padding=True)
                      for _ in range(cap - len(shard))]
    return shards


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TrainerWorker:
    """One rank. Lives in a Ray actor; the driver talks to it through DataParallelTrainer."""

    def __init__(self, rank: int, world: int, model_path: str, cfg: TrainerConfig, algo: AlgoConfig,
                 temperature: float):
        self.rank, self.world = rank, world
        self.args = (model_path, cfg, algo, temperature)
        self.trainer: PolicyTrainer | None = None

    def address(self) -> tuple[str, int]:
        return ray.util.get_node_ip_address(), _free_port()

    def init(self, master_addr: str, master_port: int) -> bool:
        model_path, cfg, algo, temperature = self.args
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master_addr, str(master_port)
        torch.set_num_threads(max(1, int(os.environ.get("ROLL_AGENTIC_TRAIN_THREADS", "1"))))
        backend = "nccl" if cfg.device.startswith("cuda") else "gloo"
        torch.distributed.init_process_group(backend, rank=self.rank, world_size=self.world)
        if cfg.device.startswith("cuda"):
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        self.trainer = PolicyTrainer(model_path, cfg, algo, temperature)
        # Same initial weights everywhere, whatever each process loaded; before
        # sharding, while every rank still holds plain full tensors.
        for p in self.trainer.model.parameters():
            torch.distributed.broadcast(p.data, src=0)
        if cfg.strategy == "fsdp":
            from roll_agentic.train.fsdp import shard_model

            shard_model(self.trainer)
        return True

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        return self.trainer.train_step(samples)

    def accumulate(self, samples: list[Sample]) -> None:
        self.trainer.accumulate(samples)

    def apply(self, step: int | None = None) -> dict[str, float]:
        return self.trainer.apply(step)

    def engine_state_dict(self) -> dict[str, torch.Tensor] | None:
        state = self.trainer.engine_state_dict()  # under FSDP a collective: every rank gathers
        return state if self.rank == 0 else None  # one copy crosses to the driver, not `world`

    def state(self) -> dict | None:
        state = self.trainer.state()
        return state if self.rank == 0 else None

    def load_state(self, state: dict, weights: dict[str, torch.Tensor]) -> None:
        self.trainer.load_state(state, weights)

    def parameters_flat(self) -> torch.Tensor:
        """Every parameter, whole (under FSDP gathered from the shards: every rank must call)."""
        params = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in self.trainer.model.parameters()]
        return torch.cat([p.detach().reshape(-1).cpu() for p in params])

    def close(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


class DataParallelTrainer:
    """The driver's view: the same methods as PolicyTrainer, run on every rank."""

    def __init__(self, model_path: str, cfg: TrainerConfig, algo: AlgoConfig, temperature: float = 1.0):
        actor = ray.remote(num_cpus=0 if not cfg.resources else None, resources=cfg.resources or None,
                           num_gpus=1 if cfg.device.startswith("cuda") else 0)(TrainerWorker)
        self.workers = [actor.remote(r, cfg.num_workers, model_path, cfg, algo, temperature)
                        for r in range(cfg.num_workers)]
        addr, port = ray.get(self.workers[0].address.remote())
        ray.get([w.init.remote(addr, port) for w in self.workers])
        self.sharded = cfg.strategy == "fsdp"
        self.step = 0

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        shards = shard_samples(samples, len(self.workers), equal_counts=self.sharded)
        metrics = ray.get([w.train_step.remote(s) for w, s in zip(self.workers, shards, strict=True)])
        self.step += 1
        return metrics[0]  # all-reduced: identical on every rank

    def accumulate(self, samples: list[Sample]) -> None:
        shards = shard_samples(samples, len(self.workers), equal_counts=self.sharded)
        ray.get([w.accumulate.remote(s) for w, s in zip(self.workers, shards, strict=True)])

    def apply(self, step: int | None = None) -> dict[str, float]:
        step = self.step if step is None else step  # the ranks' own counters see only train_step
        return ray.get([w.apply.remote(step) for w in self.workers])[0]

    def _from_rank0(self, method: str):
        # Sharded weights are gathered by a collective that every rank must join;
        # replicated ones (ddp) are read from rank 0 alone.
        workers = self.workers if self.sharded else self.workers[:1]
        return ray.get([getattr(w, method).remote() for w in workers])[0]

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        return self._from_rank0("engine_state_dict")

    def state(self) -> dict:
        state = self._from_rank0("state")
        # The ranks count train_step calls only; a streamed step (accumulate, apply,
        # step += 1 by the caller) is counted here, so this is the step to resume at.
        state["step"] = self.step
        return state

    def load_state(self, state: dict, weights: dict[str, torch.Tensor]) -> None:
        ray.get([w.load_state.remote(state, weights) for w in self.workers])
        self.step = int(state["step"])

    def parameters_per_worker(self) -> list[torch.Tensor]:
        return ray.get([w.parameters_flat.remote() for w in self.workers])

    def close(self) -> None:
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=10)
            except Exception:
                pass
            ray.kill(w)
