"""The policy trainer: GRPO advantages, PPO-clip loss on generated tokens, AdamW.

One `PolicyTrainer` per process. The step is split in two so gradients can
be streamed (RollPacker): `accumulate(samples)` adds the gradient of the
samples' summed token losses, and may be called on parts of a batch as they
finish; `apply()` divides by the token count of the whole batch (summed over
data-parallel ranks), clips and takes the one optimizer step. Summing first
and dividing once makes streamed, sharded and plain updates the same maths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from roll_agentic.config import AlgoConfig, TrainerConfig
from roll_agentic.rollout.trajectory import Trajectory
from roll_agentic.train.advantages import group_advantages
from roll_agentic.train.lora import (
    adapter_state,
    adapters_off,
    apply_lora,
    load_adapter_state,
    merged_state_dict,
)
from roll_agentic.train.loss import ppo_clip_loss_sum, token_logprobs, token_logprobs_and_entropy
from roll_agentic.train.lr_schedule import lr_at
from roll_agentic.train.trust_region import AdaptiveLR, step_kl_sum

# Optimizer steps in a row skipped for a non-finite gradient norm before the run stops.
NONFINITE_LIMIT = 3


@dataclass
class Sample:
    token_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    advantage: float
    task: str = ""
    # Padding (see parallel.shard_samples): no loss, no token, not counted; it
    # keeps FSDP ranks running the same number of forward passes.
    padding: bool = False


def samples_from_groups(groups: list[list[Trajectory]], eps: float = 1e-6, estimator: str = "grpo"
                        ) -> list[Sample]:
    """Training samples of finished groups, each with its advantage (`algo.advantage`)."""
    out: list[Sample] = []
    for group in groups:
        rewards = torch.tensor([t.reward for t in group], dtype=torch.float64)
        adv = group_advantages(rewards, estimator, eps)
        for t, a in zip(group, adv.tolist(), strict=True):
            out.append(Sample(t.token_ids, t.loss_mask, t.logprobs, float(a), t.task))
    return out


def _pad(rows: list[list], value) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows])


def reference_model(model_path: str, device: torch.device | str):
    """The frozen initial policy the KL term (algo.kl_coef > 0) is measured against."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    return model.eval().requires_grad_(False)


class PolicyTrainer:
    def __init__(self, model_path: str, cfg: TrainerConfig, algo: AlgoConfig, temperature: float = 1.0,
                 top_p: float = 1.0):
        from transformers import AutoModelForCausalLM

        # engine.temperature and engine.top_p: the logprobs are those of the distribution the
        # engines sample from (their processed logprobs), or the PPO ratio is not 1 on-policy.
        self.cfg, self.algo, self.temperature, self.top_p = cfg, algo, temperature, top_p
        torch.manual_seed(cfg.seed)
        self.device = torch.device(cfg.device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(self.device)
        # Eval mode, as the engines score: a checkpoint's dropout would make the ratio on the
        # sampling weights noise around 1 (and the step KL dropout noise). Gradients still flow.
        self.model.eval()
        # The KL term's reference: the initial policy. With LoRA that is the frozen base itself,
        # adapters off (no second copy of its weights; modules trained whole keep their initial
        # values for it, `lora.adapters_off`).
        self.ref_model = reference_model(model_path, self.device) if algo.kl_coef > 0 and not cfg.lora_rank else None
        self.lora = cfg.lora_rank > 0
        if self.lora:  # adapters only: the base is frozen (train/lora.py)
            apply_lora(self.model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets, cfg.lora_full_modules)
        self.optimizer = torch.optim.AdamW(self.trainable(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.step = 0
        self._sums = self._zero_sums()
        self._pending: list[Sample] = []
        self.trust = AdaptiveLR(algo.target_kl)  # lr follows each step's KL (trust_region.py)
        # With a target KL: each micro-batch's inputs and pre-step logprobs, to measure the step.
        self._trained: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._nonfinite_streak = 0  # optimizer steps skipped in a row for a NaN/inf gradient norm

    def trainable(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer steps: all of them, or with LoRA the adapters (and any
        module trained whole)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @staticmethod
    def _zero_sums() -> dict[str, float]:
        return {"loss": 0.0, "policy": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0, "ratio": 0.0,
                "logprob_abs_diff": 0.0, "tokens": 0.0, "rows": 0.0, "samples": 0.0, "at_limit": 0.0}

    # -- one optimizer step, possibly streamed ---------------------------------------------
    def accumulate(self, samples: list[Sample]) -> None:
        """Adds the gradient of the *sum* of the samples' token losses.

        Dividing by the batch's token count waits until `apply`, when the
        count is known (streamed groups, data-parallel shards). Samples wait
        until a full micro-batch is there, so a batch streamed in parts is cut
        into exactly the micro-batches of the same batch given at once: the
        streamed update is the plain update, not an approximation of it.
        """
        self._pending.extend(samples)
        mb = self.cfg.micro_batch_size
        while len(self._pending) >= mb:
            self._backward(self._pending[:mb])
            del self._pending[:mb]

    def _backward(self, part: list[Sample]) -> None:
        ids = _pad([s.token_ids for s in part], 0).to(self.device)  # (B, T)
        mask = _pad([s.loss_mask for s in part], 0).to(self.device)  # (B, T)
        old = _pad([s.old_logprobs for s in part], 0.0).float().to(self.device)  # (B, T)
        adv = torch.tensor([s.advantage for s in part], dtype=torch.float32, device=self.device)  # (B,)
        attn = _pad([[1] * len(s.token_ids) for s in part], 0).to(self.device)
        logits = self.model(input_ids=ids, attention_mask=attn).logits  # (B, T, V)
        lp, entropy = token_logprobs_and_entropy(  # (B, T) each; entropy is a bare metric unless rewarded
            logits, ids, self.temperature, entropy_grad=self.algo.entropy_coef > 0, top_p=self.top_p)
        ref = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref = token_logprobs(self.ref_model(input_ids=ids, attention_mask=attn).logits, ids,
                                     self.temperature, self.top_p)
        elif self.algo.kl_coef > 0 and self.lora:
            with torch.no_grad(), adapters_off(self.model):
                ref = token_logprobs(self.model(input_ids=ids, attention_mask=attn).logits, ids,
                                     self.temperature, self.top_p)
        algo = self.algo
        sums = ppo_clip_loss_sum(lp, old, adv, mask, algo.clip_eps, ref, algo.kl_coef, entropy,
                                 algo.entropy_coef, algo.clip_eps_high, algo.dual_clip, algo.loss_agg)
        sums.loss.backward()
        if self.trust.enabled:
            self._trained.append((ids, attn, mask, lp.detach()))
        for k in ("policy", "kl", "entropy", "clipped", "ratio", "logprob_abs_diff", "tokens", "rows", "at_limit"):
            self._sums[k] += getattr(sums, k)
        self._sums["loss"] += float(sums.loss.detach())
        self._sums["samples"] += sum(not s.padding for s in part)

    def apply(self, step: int | None = None) -> dict[str, float]:
        """All-reduces gradients (when distributed), clips, steps; returns the step's metrics.

        `step` (0-based) sets the learning rate (trainer.lr_schedule); by default the
        number of training steps this trainer has finished."""
        if self._pending:
            self._backward(self._pending)
            self._pending = []
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            from roll_agentic.train.fsdp import is_sharded

            if not is_sharded(self.model):  # FSDP has reduce-scattered already
                for p in self.trainable():
                    if p.grad is None:  # a rank with an empty shard still joins every collective
                        p.grad = torch.zeros_like(p)
                    torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.SUM)
            # On the model's device: NCCL reduces only GPU tensors.
            t = torch.tensor([self._sums[k] for k in self._sums], dtype=torch.float64, device=self.device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
            self._sums = dict(zip(self._sums, t.tolist(), strict=True))
        # The mean over the whole batch: of its tokens, or (seq_mean_token_mean) of its trajectories.
        per_row = self.algo.loss_agg == "seq_mean_token_mean"
        denominator = max(self._sums["rows" if per_row else "tokens"], 1.0)
        scale = 1.0 / denominator
        params = self.trainable()
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor
            grad_norm = grad_norm.full_tensor()
        lr = lr_at(self.step if step is None else step, self.cfg.lr, self.cfg.total_steps, self.cfg.lr_schedule,
                   self.cfg.lr_min_ratio, self.cfg.lr_warmup_steps)
        lr *= self.trust.mult  # 1 unless a target KL was overshot (trust_region.py)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # A NaN/inf gradient (the norm is global: all-reduced under DDP, a full tensor under FSDP,
        # so every rank decides alike) would write NaN into every weight and Adam moment, then be
        # published and checkpointed: the step is skipped instead, and a run of them stops.
        skipped = not bool(torch.isfinite(torch.as_tensor(grad_norm)).all())
        if skipped:
            self.optimizer.zero_grad(set_to_none=True)
            self._trained = []  # no step to measure: the trust region keeps its rate
            self._nonfinite_streak += 1
            if self._nonfinite_streak >= NONFINITE_LIMIT:
                self._sums = self._zero_sums()
                raise RuntimeError(
                    f"the gradient norm was not finite ({float(grad_norm)}) in {self._nonfinite_streak} optimizer "
                    f"steps in a row, all skipped: training has diverged. Resume from the last checkpoint with a "
                    f"lower trainer.lr (now {self.cfg.lr}) and/or a smaller trainer.max_grad_norm "
                    f"(now {self.cfg.max_grad_norm})")
            step_kl, next_mult = 0.0, self.trust.mult
        else:
            self._nonfinite_streak = 0
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            step_kl = self._step_kl() if self.trust.enabled else 0.0
            next_mult = self.trust.update(step_kl)  # the rate of the next step, not of this one
        tokens = max(self._sums["tokens"], 1.0)
        metrics = {
            "train/loss": self._sums["loss"] / denominator,  # the objective the step minimised
            "train/policy_loss": self._sums["policy"] / tokens,
            "train/kl": self._sums["kl"] / tokens,
            "train/entropy": self._sums["entropy"] / tokens,
            "train/clip_frac": self._sums["clipped"] / tokens,
            "train/ratio_mean": self._sums["ratio"] / tokens,
            "train/logprob_diff": self._sums["logprob_abs_diff"] / tokens,
            "train/ratio_at_limit": self._sums["at_limit"],  # tokens that trained nothing (loss.py)
            "train/grad_norm": float(grad_norm),
            "train/lr": lr,
            "train/step_kl": step_kl,
            "train/lr_mult": next_mult,
            "train/tokens": self._sums["tokens"],
            "train/samples": self._sums["samples"],
            "train/skipped_nonfinite": 1.0 if skipped else 0.0,
        }
        self._sums = self._zero_sums()
        return metrics

    def _step_kl(self) -> float:
        """KL from the policy before this step to the one after, on the tokens it trained on."""
        kl, tokens = 0.0, 0.0
        with torch.no_grad():
            for ids, attn, mask, before in self._trained:
                after = token_logprobs(self.model(input_ids=ids, attention_mask=attn).logits, ids,
                                       self.temperature, self.top_p)
                kl += step_kl_sum(before, after, mask.float())
                tokens += float(mask.sum())
        self._trained = []
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            t = torch.tensor([kl, tokens], dtype=torch.float64, device=self.device)  # every worker adapts alike
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
            kl, tokens = t.tolist()
        return kl / max(tokens, 1.0)

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """ppo_epochs passes over the batch, one optimizer step each; metrics of the first."""
        first: dict[str, float] = {}
        for _epoch in range(self.cfg.ppo_epochs):
            self.accumulate(samples)
            m = self.apply()
            first = first or m
        self.step += 1
        return first

    # -- weights and state ---------------------------------------------------------------
    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        """Parameters under Hugging Face names, as engines load them (tied lm_head left out)."""
        from roll_agentic.train.fsdp import full_state_dict

        state = merged_state_dict(self.model) if self.lora else full_state_dict(self.model)
        if getattr(self.model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        return state

    def state(self) -> dict:
        from roll_agentic.train.fsdp import full_optimizer_state

        state = {
            "step": self.step,
            "lr_mult": self.trust.mult,
            "optimizer": full_optimizer_state(self.model, self.optimizer),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        }
        if self.lora:  # the checkpoint's weights are merged: the adapters resume the run
            state["lora"] = adapter_state(self.model)
        return state

    def load_state(self, state: dict, weights: dict[str, torch.Tensor]) -> None:
        from roll_agentic.train.fsdp import load_full_state

        if self.lora or "lora" in state:
            self._load_lora_state(state, weights)
        else:
            load_full_state(self.model, self.optimizer, weights, state["optimizer"])
        # The saved param groups carry the run's hyperparameters: a resume runs with its own
        # settings (job.py prints what differs), so `trainer.weight_decay` is this run's, not
        # the checkpoint's (lr is set at every step by `apply`).
        for group in self.optimizer.param_groups:
            group["weight_decay"] = self.cfg.weight_decay
        self.step = int(state["step"])
        # checkpoints from before it: 1. A resume with algo.target_kl off: 1 too, since a
        # multiplier the run had shrunk would never adapt again and cut every later step's rate.
        self.trust.mult = float(state.get("lr_mult", 1.0)) if self.trust.enabled else 1.0
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])

    def _load_lora_state(self, state: dict, weights: dict[str, torch.Tensor]) -> None:
        """A LoRA run's resume: its adapters and their optimizer state onto the base from `model.path`.

        The checkpoint's weights are the merged ones the engines took; the base is rebuilt from
        the model path as when the run started, so they are not loaded here.
        """
        if "lora" not in state:
            raise ValueError("the checkpoint is of a run that trained every weight: resume it with "
                             "trainer.lora_rank=0 (or start a LoRA run from its exported model)")
        if not self.lora:
            raise ValueError("the checkpoint is of a LoRA run: resume it with the run's own trainer.lora_rank, "
                             "lora_targets and lora_full_modules (or export it and train on the exported model)")
        before = adapter_state(self.model)
        load_adapter_state(self.model, state["lora"])
        try:
            _check_merged(merged_state_dict(self.model), weights)
        except ValueError:
            load_adapter_state(self.model, before)  # a refusal leaves the trainer as it was
            raise
        from roll_agentic.train.fsdp import load_optimizer_state

        load_optimizer_state(self.model, self.optimizer, state["optimizer"])


def _check_merged(merged: dict[str, torch.Tensor], weights: dict[str, torch.Tensor]) -> None:
    """A LoRA checkpoint's merged weights must be this base plus its adapters: else the base
    (`model.path`) is not the one the run trained on, and the resumed policy would not be the
    checkpoint's. Refused in one line, naming a tensor that differs."""
    for name, saved in weights.items():
        own = merged.get(name)
        if own is None or own.shape != saved.shape or not torch.allclose(own, saved.to(own.dtype), atol=1e-4):
            raise ValueError(f"the checkpoint's weights are not model.path's base plus the run's LoRA adapters "
                             f"({name} differs): resume with the model the run was started with (model.path)")
