"""Data-parallel training over Ray workers with torch.distributed.

`trainer.num_workers` Ray actors each hold a full `PolicyTrainer` (or, with
`trainer.strategy=fsdp` on GPUs, an FSDP2-sharded one) and a shard of every
batch. Each scales its loss by the whole batch's token count, gradients are
summed across workers (gloo on CPU, NCCL on GPU), and every worker takes the
same optimizer step, so parameters stay identical, bit for bit, without
being broadcast.

A step needs every worker: when one dies or hangs, the others wait in a
collective. Each collective gives up after `collective_timeout_s` (else
torch's 30 minutes), and the driver then stops every worker and raises one
error naming the worker, instead of waiting on the rest.
"""

from __future__ import annotations

import datetime
import os
import socket

import ray
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.engine.placement import placement
from roll_agentic.train.trainer import PolicyTrainer, Sample

# How long a rank waits in one collective for the others. The ranks are called
# together, so a wait is only their imbalance; ten minutes (NCCL's own default)
# is far past any step's, and a dead or stuck rank ends the run in bounded time.
COLLECTIVE_TIMEOUT_S = 600.0  # trainer.collective_timeout_s


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


def _listening_socket(addr: str) -> socket.socket:
    """The rendezvous store's socket, bound to `addr` only.

    torch's TCPStore binds every interface (MASTER_ADDR only tells the others
    where to connect); handed a socket, it listens where that one does. Bound
    here and kept open until the store takes it, the port cannot be taken by
    another process in between either.
    """
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    s.bind((addr, 0))
    s.listen()
    return s


def _sockets_on(addr: str) -> None:
    """Gloo and NCCL listen on the interface that holds `addr`, unless told otherwise.

    Gloo binds the address the machine's hostname resolves to (often the
    network one, reachable from outside), whatever MASTER_ADDR says, and NCCL
    picks a network interface of its own. Ray's node address is loopback on a
    single machine (cluster.py) and the node's own in a cluster; the interface
    holding it is the one both should use.
    """
    import psutil  # a dependency of ray[default]

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == addr for a in addrs):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
            os.environ.setdefault("NCCL_SOCKET_IFNAME", name)
            return


class TrainerWorker:
    """One rank. Lives in a Ray actor; the driver talks to it through DataParallelTrainer."""

    def __init__(self, rank: int, world: int, model_path: str, cfg: TrainerConfig, algo: AlgoConfig,
                 temperature: float, top_p: float = 1.0):
        self.rank, self.world = rank, world
        self.args = (model_path, cfg, algo, temperature, top_p)
        self.trainer: PolicyTrainer | None = None
        self._listener: socket.socket | None = None

    def address(self) -> tuple[str, int]:
        """Rank 0: where the others meet it (its node's address, a port it holds open)."""
        self._listener = _listening_socket(ray.util.get_node_ip_address())
        return self._listener.getsockname()[:2]

    def init(self, master_addr: str, master_port: int, timeout_s: float = COLLECTIVE_TIMEOUT_S) -> bool:
        model_path, cfg, algo, temperature, top_p = self.args
        torch.set_num_threads(max(1, int(os.environ.get("ROLL_AGENTIC_TRAIN_THREADS", "1"))))
        backend = "nccl" if cfg.device.startswith("cuda") else "gloo"
        _sockets_on(ray.util.get_node_ip_address())
        timeout = datetime.timedelta(seconds=timeout_s)
        listen_fd = self._listener.detach() if self._listener is not None else None  # the store owns it now
        store = torch.distributed.TCPStore(master_addr, master_port, self.world, is_master=self.rank == 0,
                                           timeout=timeout, master_listen_fd=listen_fd)
        torch.distributed.init_process_group(backend, store=store, rank=self.rank, world_size=self.world,
                                             timeout=timeout)
        if cfg.device.startswith("cuda"):
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        self.trainer = PolicyTrainer(model_path, cfg, algo, temperature, top_p)
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

    def __init__(self, model_path: str, cfg: TrainerConfig, algo: AlgoConfig, temperature: float = 1.0,
                 collective_timeout_s: float = COLLECTIVE_TIMEOUT_S, top_p: float = 1.0):
        # "CPU"/"GPU" in trainer.resources become num_cpus/num_gpus, as for the pools: Ray
        # refuses them inside `resources`. No CPU slot unless asked (or pinned to a node type).
        place = placement(cfg.resources, default_cpus=0.0, pinned_cpus=1.0)
        num_gpus = max(place.num_gpus, 1.0) if cfg.device.startswith("cuda") else place.num_gpus
        actor = ray.remote(num_cpus=place.num_cpus, num_gpus=num_gpus, resources=place.resources or None)(TrainerWorker)
        self.workers = [actor.remote(r, cfg.num_workers, model_path, cfg, algo, temperature, top_p)
                        for r in range(cfg.num_workers)]
        self.collective_timeout_s = collective_timeout_s
        addr, port = self._all("address", workers=self.workers[:1])[0]
        self._all("init", *[(addr, port, collective_timeout_s)] * len(self.workers))
        self.sharded = cfg.strategy == "fsdp"
        self.step = 0

    def _all(self, method: str, *args: tuple, workers: list | None = None) -> list:
        """`method` on each worker (with `args[i]` on worker i); as soon as one fails, one error.

        The others are then waiting in a collective for the failed one: they are
        killed at once rather than left there (holding their devices) until the
        collective times out, and the error names the rank and its cause.
        """
        workers = self.workers if workers is None else workers
        refs = [getattr(w, method).remote(*(args[i] if args else ())) for i, w in enumerate(workers)]
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(ready[0])
            except ray.exceptions.RayError as err:
                rank = refs.index(ready[0])
                cause = err.cause if isinstance(err, ray.exceptions.RayTaskError) else err  # the rank's own error
                why = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
                for w in self.workers:  # the others wait on it in a collective: stop them now
                    ray.kill(w)
                raise RuntimeError(
                    f"trainer worker {rank} of {len(self.workers)} failed in {method} ({type(cause).__name__}: "
                    f"{why}); a data-parallel step needs every worker (one timed out in a collective waited there for "
                    f"another, dead or stuck), so all were stopped. Resume from the "
                    f"last checkpoint with trainer.resume=true (a collective gives up after "
                    f"{self.collective_timeout_s:g} s: trainer.collective_timeout_s)") from err
        return ray.get(refs)

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        shards = shard_samples(samples, len(self.workers), equal_counts=self.sharded)
        metrics = self._all("train_step", *[(s,) for s in shards])
        self.step += 1
        return metrics[0]  # all-reduced: identical on every rank

    def accumulate(self, samples: list[Sample]) -> None:
        shards = shard_samples(samples, len(self.workers), equal_counts=self.sharded)
        self._all("accumulate", *[(s,) for s in shards])

    def apply(self, step: int | None = None) -> dict[str, float]:
        step = self.step if step is None else step  # the ranks' own counters see only train_step
        return self._all("apply", *[(step,)] * len(self.workers))[0]

    def _from_rank0(self, method: str):
        # Sharded weights are gathered by a collective that every rank must join;
        # replicated ones (ddp) are read from rank 0 alone.
        return self._all(method, workers=self.workers if self.sharded else self.workers[:1])[0]

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        return self._from_rank0("engine_state_dict")

    def state(self) -> dict:
        state = self._from_rank0("state")
        # The ranks count train_step calls only; a streamed step (accumulate, apply,
        # step += 1 by the caller) is counted here, so this is the step to resume at.
        state["step"] = self.step
        return state

    def load_state(self, state: dict, weights: dict[str, torch.Tensor]) -> None:
        self._all("load_state", *[(state, weights)] * len(self.workers))
        self.step = int(state["step"])

    def parameters_per_worker(self) -> list[torch.Tensor]:
        return self._all("parameters_flat")

    def close(self) -> None:
        for w in self.workers:
            try:
                ray.get(w.close.remote(), timeout=10)
            except Exception:
                pass
            ray.kill(w)
