"""One training node: a trainer process whose model object is swapped between jobs.

The slot holds one `PolicyTrainer` on its "device" and serves one job at a
time (a Ray actor with one thread: calls are served in order). Switching job
X in:
- X is active already: nothing to do (a job running alone never switches);
- the previous job's state is copied out to host memory if it is resident,
  into that job's preallocated host buffers;
- warm: X's weights and optimizer state are copied from its host buffers
  into the tensors the device already holds (no allocation, no
  deserialisation; a rebuild only if the architecture differs);
- cold: X's last checkpoint is read from disk (page cache dropped),
  deserialised and loaded into a rebuilt optimizer;
- fresh: X was never trained; its trainer is built from its model path.
Every switch-in is timed and reported, the same job at the same sizes, so
warm and cold times compare honestly.

LoRA jobs (`trainer.lora_rank` > 0): the frozen base stays on the device and
only the trained tensors (adapters, modules trained whole) and their moments
are resident in host memory and copied on a switch: a few percent of a full
job's bytes. That holds between jobs of one *form* (`trainer_form`: the same
base and adapter shapes). A LoRA trainer of another form is parked in host
memory while the node serves other forms (its frozen base with it) and comes
back on the device when a job of its form switches in: warm, no storage read
(admission counts that base in each LoRA job's resident bytes). A form met
for the first time, or a full fine-tune after a LoRA job, gets a trainer
built from its model path (reported as "rebuilt" when the job's state came
from host memory); the placement keeps full and LoRA jobs apart
(`admission.placement_form`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from roll_agentic import faults
from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.mux.residency import (
    DeviceLayout,
    HostState,
    ResidencyStore,
    clone_tree,
    copy_in,
    copy_out,
    read_cold,
    tree_bytes,
)
from roll_agentic.train.checkpoint import latest_checkpoint, save_checkpoint
from roll_agentic.train.lora import form_of, merge_adapters
from roll_agentic.train.trainer import PolicyTrainer, Sample, reference_model
from roll_agentic.train.trust_region import AdaptiveLR


@dataclass
class SlotJob:
    model_path: str
    trainer: TrainerConfig
    algo: AlgoConfig
    temperature: float
    ckpt_root: str
    top_p: float = 1.0  # engine.top_p: the trainer scores tokens over the nucleus they were sampled from
    ref_model: torch.nn.Module | None = None  # KL reference: the job's own initial weights
    # The job's own step-size multiplier (algo.target_kl): the device trainer's was its builder's.
    trust: AdaptiveLR | None = None


def trainer_form(job: SlotJob) -> str:
    """What the device trainer must have been built as to take the job's state in place.

    A full fine-tune's model object takes any job's weights (the pool's architecture; admission
    checks it). A LoRA job's state is its adapters only: they need its own base under them, and
    adapters of its rank, targets and whole-trained modules. The placement keeps jobs of
    different forms off one training node (`JobProfile.form`)."""
    return form_of(job.model_path, job.trainer)


def base_weights(model_path: str) -> dict[str, torch.Tensor]:
    """A model path's weights as the trainer loads them (fp32, Hugging Face names), read from disk."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(Path(model_path).glob("*.safetensors")):
        out.update({k: v.to(torch.float32) for k, v in load_file(str(f)).items()})
    return out


class StepMismatch(RuntimeError):
    """A checkpoint asked for under a step number the job's trainer is not at."""


@dataclass(frozen=True)
class SwitchRecord:
    job: str
    kind: str  # none | warm | rebuilt (warm state, trainer rebuilt for the job's form) | cold | fresh
    in_s: float  # loading the job's state onto the device
    out_s: float  # copying the previous job's state to host memory
    out_job: str = ""


class TrainerSlot:
    def __init__(self, name: str, budget_bytes: int, threads: int = 1, flush_denormal: bool = False):
        torch.set_num_threads(max(1, threads))
        self.flush_denormal = flush_denormal
        self.name = name
        self.store = ResidencyStore(budget_bytes)
        self.jobs: dict[str, SlotJob] = {}
        self.trainer: PolicyTrainer | None = None
        self.form = ""  # trainer_form of the job the trainer was built for
        # LoRA trainers of forms not in use, by form: their tensors in host memory (`_park`).
        self.parked: dict[str, PolicyTrainer] = {}
        self.active: str | None = None
        self._lay: DeviceLayout | None = None
        # Full fine-tunes' KL references, one per model path (the jobs' initial weights): jobs
        # of one base share it, and only the active job's is on the device (`_reference`).
        self.refs: dict[str, torch.nn.Module] = {}

    def register(self, job: str, model_path: str, trainer: TrainerConfig, algo: AlgoConfig,
                 temperature: float, ckpt_root: str, top_p: float = 1.0) -> None:
        self.jobs[job] = SlotJob(model_path, trainer, algo, temperature, ckpt_root, top_p,
                                 trust=AdaptiveLR(algo.target_kl))

    # -- residency --------------------------------------------------------------------------
    def reserve(self, job: str, nbytes: int) -> None:
        self.store.reserve(job, nbytes)

    def release(self, job: str) -> None:
        """The job left (finished, failed, cancelled): its device and host state go."""
        self.store.evict(job)
        self.jobs.pop(job, None)
        if self.active == job:
            self.active = None
        live = {trainer_form(spec) for spec in self.jobs.values()}
        for form in [f for f in self.parked if f not in live]:  # no job of its form left
            del self.parked[form]
        used = {spec.model_path for spec in self.jobs.values()}
        for path in [p for p in self.refs if p not in used]:  # no job of that base left
            del self.refs[path]

    def drop_state(self, job: str) -> None:
        """Forgets the job's device and host copies (keeps its registration and reservation):
        its next switch-in loads its checkpoint, as after a roll-back to it."""
        self.store.states.pop(job, None)
        if self.active == job:
            self.active = None

    def info(self) -> dict:
        return {"name": self.name, "active": self.active, "budget_bytes": self.store.budget_bytes,
                "reserved_bytes": dict(self.store.reserved), "held_bytes": {j: s.nbytes for j, s in
                                                                           self.store.states.items()}}

    # -- switching ---------------------------------------------------------------------------
    def _layout(self) -> DeviceLayout:
        """The device tensors of the current model and optimizer, listed once per pair of objects."""
        tr = self.trainer
        assert tr is not None
        lay = self._lay
        if lay is None or lay.model is not tr.model or lay.optimizer is not tr.optimizer:
            lay = self._lay = DeviceLayout.of(tr.model, tr.optimizer, trained_only=tr.lora)
        return lay

    def _switch_out(self) -> tuple[float, str]:
        job = self.active
        if job is None or self.trainer is None:
            return 0.0, ""
        t0 = time.perf_counter()
        if self.store.is_resident(job):  # into the job's own host buffers, in place after the first time
            self.store.put(job, copy_out(self._layout(), self.trainer.step, self.store.get(job)))
        self.active = None
        return time.perf_counter() - t0, job

    def _bind(self, job: str) -> PolicyTrainer:
        """The job's config on the device trainer (its lr etc. come with its optimizer state)."""
        spec, tr = self.jobs[job], self.trainer
        assert tr is not None
        tr.cfg, tr.algo, tr.temperature, tr.top_p = spec.trainer, spec.algo, spec.temperature, spec.top_p
        if spec.algo.kl_coef > 0 and not tr.lora:
            # Also for a job first switched in on a slot whose trainer another job built
            # (before, its reference was dropped there and the KL term vanished).
            # (A LoRA job's is its base with the adapters off: no copy.)
            spec.ref_model = self._reference(spec.model_path, tr.device)
        tr.ref_model = spec.ref_model
        if spec.trust is not None:
            tr.trust = spec.trust
        return tr

    def _reference(self, model_path: str, device: torch.device | str) -> torch.nn.Module:
        """The KL reference of jobs that start from `model_path`, on `device`; every other one in
        host memory. Each full fine-tune kept its own on the device: N jobs of one base held
        N frozen copies of it there, beside the trainer's model."""
        ref = self.refs.get(model_path)
        if ref is None:
            ref = self.refs[model_path] = reference_model(model_path, device)
        for path, model in self.refs.items():
            where = torch.device(device) if path == model_path else torch.device("cpu")
            if next(model.parameters()).device.type != where.type:
                model.to(where)
        return ref

    def _warm(self, job: str, host: HostState) -> None:
        """Host buffers -> the device's allocated tensors; a rebuild if the architecture differs."""
        tr = self._bind(job)
        if copy_in(self._layout(), host):
            tr.step = host.step
            return
        # Copied, not aliased: optimizer.load_state_dict keeps the tensors it is given.
        weights, state = self._saved(job, host)
        self._rebuild(job, clone_tree(weights), clone_tree(state))

    def _saved(self, job: str, host: HostState) -> tuple[dict, dict]:
        """A resident job's (engine weights, trainer state), as a checkpoint holds them.

        A LoRA job's host copy holds its trained tensors only: its merged weights are its base,
        read from its model path, with them merged in (`lora.merge_adapters`)."""
        spec = self.jobs[job]
        state = host.trainer_state()
        if spec.trust is not None:
            state["lr_mult"] = spec.trust.mult
        if not host.trained_only:
            return host.weights, state
        t = spec.trainer
        weights = merge_adapters(base_weights(spec.model_path), host.weights, t.lora_alpha / t.lora_rank)
        if self.trainer is not None and getattr(self.trainer.model.config, "tie_word_embeddings", False):
            weights.pop("lm_head.weight", None)  # as `PolicyTrainer.engine_state_dict` (the pool's architecture)
        return weights, {**state, "lora": host.weights}

    def _rebuild(self, job: str, weights: dict, trainer_state: dict) -> None:
        """State dicts onto the device model: a fresh optimizer, loaded (the cold path)."""
        spec, tr = self.jobs[job], self._bind(job)
        # load_state_dict restores the job's own hyperparameters (lr, weight decay) with its moments.
        tr.optimizer = torch.optim.AdamW(tr.trainable(), lr=spec.trainer.lr, weight_decay=spec.trainer.weight_decay)
        tr.load_state(trainer_state, weights)

    def _park(self) -> None:
        """The device trainer steps aside: a LoRA one is kept, its tensors in host memory, for
        its form's next job (a full one is let go: every full job's state is whole in host
        memory, and keeping its model too would hold the model twice)."""
        tr = self.trainer
        if tr is not None and tr.lora:
            _move(tr, torch.device("cpu"))
            self.parked[self.form] = tr
        self.trainer, self._lay = None, None

    def _unpark(self, form: str) -> None:
        """A parked trainer of `form` back on the device, if there is one."""
        tr = self.parked.pop(form, None)
        if tr is not None:
            _move(tr, tr.device)
            self.trainer, self.form = tr, form

    def _build(self, job: str) -> PolicyTrainer:
        """A device trainer built for the job from its model path (its initial weights)."""
        spec = self.jobs[job]
        self.trainer, self._lay = None, None  # the old model's tensors go first: a GPU never holds two
        self.trainer = PolicyTrainer(spec.model_path, spec.trainer, spec.algo, spec.temperature, spec.top_p)
        self.form = trainer_form(spec)
        if self.trainer.ref_model is not None:  # the one it built: shared from now on
            self.refs.setdefault(spec.model_path, self.trainer.ref_model)
        return self._bind(job)

    def switch_in(self, job: str) -> SwitchRecord:
        if self.active == job:
            return SwitchRecord(job, "none", 0.0, 0.0)
        out_s, out_job = self._switch_out()
        spec = self.jobs[job]
        t0 = time.perf_counter()
        host = self.store.get(job)
        form = trainer_form(spec)
        rebuilt = False
        if self.trainer is None or self.form != form:
            had = self.trainer is not None
            self._park()
            self._unpark(form)
            rebuilt = had and self.trainer is None  # none of its form kept: one is built below
        if host is not None:
            if self.trainer is None:
                self._build(job)
            self._warm(job, host)
            kind = "rebuilt" if rebuilt else "warm"
        else:
            ckpt = latest_checkpoint(spec.ckpt_root)
            kind = "cold"
            if self.trainer is None or ckpt is None:
                self._build(job)
                kind = "fresh"
            if ckpt is not None:  # storage -> host (page cache dropped) -> deserialise -> load
                weights, trainer_state, _read_s = read_cold(Path(ckpt))
                self._rebuild(job, weights, trainer_state)
                kind = "cold"
        self.active = job
        return SwitchRecord(job, kind, time.perf_counter() - t0, out_s, out_job)

    # -- the job's work ------------------------------------------------------------------------
    def _active(self, job: str) -> PolicyTrainer:
        if self.active != job or self.trainer is None:
            raise RuntimeError(f"trainer slot {self.name}: job {job} is not switched in (active: {self.active})")
        return self.trainer

    def train(self, job: str, samples: list[Sample]) -> dict[str, float]:
        tr = self._active(job)
        faults.train_step()
        # The flag lives in the calling thread's FPU state, so it is set where the step runs.
        torch.set_flush_denormal(self.flush_denormal)
        return tr.train_step(samples)

    def write_weights(self, job: str, path: str) -> float:
        """The write half of weight sync: the engines load this file at the job's next rollout."""
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        tmp = f"{path}.tmp-{os.getpid()}"
        save_file(self._active(job).engine_state_dict(), tmp)
        os.replace(tmp, path)
        return time.perf_counter() - t0

    def state_bytes(self, job: str) -> tuple[int, int]:
        """(trainer state, engine weights) in bytes: what residency has to hold for the job."""
        tr = self._active(job)
        weights = tree_bytes(tr.engine_state_dict())
        if tr.lora:
            # Its trained tensors and their moments, and its form's trainer while parked (`_park`):
            # the frozen base and the same again, and the initial values of the modules trained
            # whole (the KL reference's, `lora.adapters_off`). Jobs of one form share that
            # trainer: counted for each, an upper bound.
            frozen = sum(p.numel() * p.element_size() for p in tr.model.parameters() if not p.requires_grad)
            whole = tree_bytes(getattr(tr.model, "_lora_whole_initial", {}))
            return 2 * trainer_state_bytes(tr) + frozen + whole, weights
        ref = sum(p.numel() * p.element_size() for p in tr.ref_model.parameters()) if tr.ref_model else 0
        return weights + trainer_state_bytes(tr) + ref, weights

    def checkpoint(self, job: str, version: int, run_state: dict, keep: int) -> str:
        """Saves the job's state as step `version`; refuses when its trainer is at another step.

        A caller's `version` can lag the trainer: a `mux cancel` that cut a train phase after
        its update had been queued here saved step n+1's weights under step n's number (and
        step n's buffer), and a resume then trained one step twice. Nothing is written then."""
        spec = self.jobs[job]
        trainer = self.trainer if self.active == job else None
        host = None if trainer is not None else self.store.get(job)
        if trainer is None and host is None:
            raise RuntimeError(f"trainer slot {self.name}: no state of job {job} to checkpoint")
        step = trainer.step if trainer is not None else host.step  # type: ignore[union-attr]
        if step != version:
            raise StepMismatch(f"trainer slot {self.name}: job {job}'s trainer is at step {step}, not {version}: "
                               "not checkpointed (it would label one step's state with another's number)")
        if trainer is not None:
            weights, state = trainer.engine_state_dict(), trainer.state()
        else:
            assert host is not None
            weights, state = self._saved(job, host)
        return str(save_checkpoint(spec.ckpt_root, version, weights, state, run_state, keep=keep))

    def park(self, job: str, version: int, run_state: dict, keep: int) -> str:
        """Checkpoints a job that is not resident (profiled, not yet admitted) and drops it."""
        path = self.checkpoint(job, version, run_state, keep)
        self.store.states.pop(job, None)
        if self.active == job:
            self.active = None  # the device copy is now stale: the next job overwrites it
        return path

    def ping(self) -> bool:
        return True


def trainer_state_bytes(tr: PolicyTrainer) -> int:
    """`tree_bytes(tr.state())`, counted from the live tensors: no copy is made.

    `state()` builds the checkpoint's form of the optimizer state, on the CPU: on a GPU
    trainer that copied every moment (twice the trained weights) to host memory only to
    count its bytes. The same tensors are counted here where they are: the optimizer's
    per-parameter state (`state_dict()["state"]` holds these very tensors, its step counts
    included), the torch RNG state (numpy's and Python's are no tensors: `tree_bytes` counts
    them as 0) and, for LoRA, the trained parameters (`adapter_state` copies exactly those).
    """
    optimizer = sum(tree_bytes(s) for s in tr.optimizer.state.values())
    rng = tree_bytes(torch.get_rng_state())  # a few KiB, and what `state()` counts
    trained = sum(p.numel() * p.element_size() for p in tr.model.parameters() if p.requires_grad) if tr.lora else 0
    return optimizer + rng + trained


def _move(tr: PolicyTrainer, device: torch.device) -> None:
    """A trainer's model and optimizer moments onto `device` (nothing moves on a CPU trainer)."""
    if next(tr.model.parameters()).device == device:
        return
    tr.model.to(device)
    for state in tr.optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() > 0:  # AdamW keeps its step count on the CPU
                state[key] = value.to(device)
