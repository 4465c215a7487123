"""The policy loss: PPO's clipped surrogate on generated tokens, plus optional KL.

Per generated token t with advantage A (the trajectory's):
    ratio_t = exp(logp_t - logp_old_t)          (logp_old: the engine's sampling logprob)
    loss_t  = max(-A * ratio_t, -A * clip(ratio_t, 1 - eps, 1 + eps))   (Schulman et al. 2017, eq. 7)
    kl_t    = exp(ref_t - logp_t) - (ref_t - logp_t) - 1                 (k3 estimator, Schulman 2020)
    ent_t   = -sum_v p_t(v) log p_t(v)                                  (entropy bonus, subtracted)
The entropy bonus keeps GRPO out of its dead zone: once every member of a
group samples the same reply, the group's advantages are all zero and no
gradient can ever move the policy again.
The caller sums loss_t over masked tokens and divides by the batch's total
number of generated tokens, so micro-batches and streamed partial batches add
up to the same update.

Options researchers reach for (`AlgoConfig`), each off by default:
- clip-higher (DAPO, Yu et al. 2025): an upper clip bound 1 + eps_high above
  1 + eps, so a token of positive advantage that was unlikely may still grow;
- dual clip (Ye et al. 2020): for A < 0 the loss is at most c * |A|, so a
  token whose ratio ran far above 1 (a stale sample) cannot dominate the step;
- sequence-mean aggregation (GRPO as published, Shao et al. 2024): each
  trajectory's token losses are averaged first, then the trajectories, so a
  long reply weighs as much as a short one. The caller then divides by the
  batch's trajectory count instead (`LossSums.rows`), exact across
  micro-batches and streamed parts as the token mean is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from roll_agentic.config import LOSS_AGGREGATIONS


@dataclass
class LossSums:
    """Sums over masked tokens; divide by the token count for means."""

    loss: torch.Tensor
    policy: float
    kl: float
    entropy: float
    clipped: float
    ratio: float
    logprob_abs_diff: float
    tokens: float
    rows: float = 0.0  # trajectories with a trained token: seq_mean_token_mean's denominator
    # Tokens whose log-ratio passed LOG_RATIO_LIMIT (a behaviour logprob of -inf): they train
    # nothing, and are left out of the loss and the ratio metrics, which e^20 made unreadable.
    at_limit: float = 0.0


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0,
                   top_p: float = 1.0) -> torch.Tensor:
    """logits (B, T, V), token_ids (B, T) -> logprob of token t+1 at position t, shifted to (B, T).

    Position 0 gets 0.0: the first token is never generated. With `top_p` < 1, the
    logprob under the renormalised nucleus, as the engines report it (`nucleus_logprobs`).
    """
    return token_logprobs_and_entropy(logits, token_ids, temperature, with_entropy=False, top_p=top_p)[0]


# Rows of (rows, V) whose nucleus is found at once: bounds the sort's transient memory
# (values + int64 indices + cumsum) to a few hundred MiB whatever B * T * V is.
NUCLEUS_CHUNK_ELEMENTS = 1 << 25
# The log ratio above which a token's ratio (and k3 KL term) stops growing: e^20 ~ 5e8.
LOG_RATIO_LIMIT = 20.0


def nucleus_mask(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """(..., V) log-softmaxed logits -> bool (..., V): the top-p nucleus of each row.

    The engines' rule exactly (hf_engine._sample; vLLM's top-p): sort descending,
    keep a token while the probability mass *before* it is < top_p (the first token
    is always kept), ties ordered as torch's descending sort orders them. No
    gradient: which tokens are in is piecewise constant in the logits.
    """
    with torch.no_grad():
        flat = logprobs.detach().reshape(-1, logprobs.shape[-1])
        keep = torch.empty(flat.shape, dtype=torch.bool, device=flat.device)
        step = max(1, NUCLEUS_CHUNK_ELEMENTS // max(flat.shape[-1], 1))
        for i in range(0, flat.shape[0], step):
            sorted_lp, order = flat[i:i + step].sort(dim=-1, descending=True)
            sorted_p = sorted_lp.exp()
            kept = sorted_p.cumsum(-1) - sorted_p < top_p
            keep[i:i + step] = torch.zeros_like(kept).scatter(-1, order, kept)
        return keep.reshape(logprobs.shape)


def nucleus_logprobs(lp: torch.Tensor, picked_ids: torch.Tensor, top_p: float) -> torch.Tensor:
    """lp (..., V) temperature log-softmax, picked_ids (...) -> (...) logprob of each picked
    token under the top-p nucleus of its row, renormalised: the engines' processed logprob.

    A picked token outside the current nucleus (possible once the weights have moved
    since it was sampled: its probability there is 0, logprob -inf) is scored under the
    nucleus widened by that one token instead. -inf would make the ratio 0 and, through
    0 * inf in the backward, NaN gradients; the widened value is finite, equals the true
    nucleus logprob for every token inside the nucleus (the set is then unchanged), is
    continuous where a token leaves it, and its gradient pulls the token back in for a
    positive advantage (a negative one is clipped by PPO at ratio < 1 - eps anyway).
    """
    keep = nucleus_mask(lp, top_p)
    keep.scatter_(-1, picked_ids[..., None], True)  # the widened nucleus: the picked token always in
    picked = lp.gather(-1, picked_ids[..., None]).squeeze(-1)
    # masked_fill's backward gives the dropped entries no gradient, and logsumexp over
    # -inf entries adds exactly 0: finite values, finite gradients.
    return picked - torch.logsumexp(lp.masked_fill(~keep, float("-inf")), dim=-1)


def token_logprobs_and_entropy(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0,
                               with_entropy: bool = True, entropy_grad: bool = True, top_p: float = 1.0
                               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As `token_logprobs`, plus the entropy of the temperature-scaled distribution at each token, (B, T).

    With `entropy_grad=False` the entropy is a metric only: computed without
    autograd, so it keeps no (B, T, V) activations alive for the backward pass.
    With `top_p` < 1 the entropy stays that of the whole temperature-scaled
    distribution, not of the nucleus: once a nucleus is one token its entropy is 0
    with no gradient, the very dead zone the entropy bonus is there to leave.
    """
    lp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)  # (B, T-1, V)
    if top_p < 1.0:
        picked = nucleus_logprobs(lp, token_ids[:, 1:], top_p)  # (B, T-1)
    else:
        picked = lp.gather(-1, token_ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    zero = torch.zeros_like(picked[:, :1])
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = torch.cat([zero.detach(), -(lp.exp() * lp).sum(-1)], dim=1)  # (B, T)
    return torch.cat([zero, picked], dim=1), entropy


def ppo_clip_loss_sum(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, clip_eps: float, ref_logprobs: torch.Tensor | None = None,
                      kl_coef: float = 0.0, entropy: torch.Tensor | None = None,
                      entropy_coef: float = 0.0, clip_eps_high: float = 0.0, dual_clip: float = 0.0,
                      loss_agg: str = "token_mean") -> LossSums:
    """All (B, T) except advantages (B,). Returns sums over mask == 1.

    `clip_eps_high` (0: = `clip_eps`): the upper clip bound is 1 + clip_eps_high.
    `dual_clip` (0: off; else > 1): a negative-advantage token's loss is at most dual_clip * |A|.
    `loss_agg`: "token_mean" sums token losses (the caller divides by `tokens`);
    "seq_mean_token_mean" sums each row's token mean (the caller divides by `rows`).
    The metric sums (`policy`, `kl`, `entropy`, ...) are over tokens either way.
    """
    if loss_agg not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_agg must be one of {', '.join(LOSS_AGGREGATIONS)}, not {loss_agg!r}")
    mask = mask.float()
    row_tokens = mask.sum(dim=1, keepdim=True)  # (B, 1)
    # What each token's loss counts for in the sum the caller divides.
    weight = mask if loss_agg == "token_mean" else mask / row_tokens.clamp(min=1.0)
    adv = advantages[:, None]  # (B, 1)
    # Masked by selection, not by product: a -inf logprob at a position outside the mask times
    # 0 is nan. Clamped above: one behaviour logprob of -inf made the ratio inf and its gradient
    # nan, and clip_grad_norm_ spread the nan to every weight. Past e^LOG_RATIO_LIMIT PPO clips
    # the token for A > 0, and for A < 0 a gradient scaled by over e^20 is what dual-clip PPO
    # cuts too. Not below: a ratio near 0 overflows nothing, and its small gradient is how a
    # positive advantage pulls a token that left the nucleus back in.
    raw_log_ratio = torch.where(mask > 0, logprobs - old_logprobs, 0.0)
    log_ratio = raw_log_ratio.clamp(max=LOG_RATIO_LIMIT)
    # Past the limit the clamp's gradient is 0, so the token's policy term is a constant (|A| e^20
    # for A < 0): left out of the loss it changes no gradient, and `train/loss` stays readable.
    live = mask * (raw_log_ratio.detach() <= LOG_RATIO_LIMIT).float()
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + (clip_eps_high or clip_eps))
    per_token = torch.maximum(unclipped, clipped)  # (B, T)
    capped = torch.zeros_like(per_token, dtype=torch.bool)
    if dual_clip > 0:
        # Only for A < 0: there the clipped surrogate -A * ratio grows without bound in the ratio.
        cap = -adv * dual_clip  # (B, 1), positive where A < 0
        capped = (adv < 0) & (per_token > cap)
        per_token = torch.where(adv < 0, torch.minimum(per_token, cap), per_token)
    total = (per_token * weight * live).sum()
    kl_sum = 0.0
    if ref_logprobs is not None and kl_coef > 0:
        # Clamped above as the log-ratio: exp(d) overflowed to inf past d = 88 (float32).
        d = torch.where(mask > 0, ref_logprobs - logprobs, 0.0).clamp(max=LOG_RATIO_LIMIT)
        kl = torch.exp(d) - d - 1.0
        total = total + kl_coef * (kl * weight).sum()
        kl_sum = float((kl * mask).sum().detach())
    ent_sum = 0.0
    if entropy is not None:
        if entropy_coef > 0:
            total = total - entropy_coef * (entropy * weight).sum()
        ent_sum = float((entropy * mask).sum().detach())
    with torch.no_grad():
        was_clipped = (((clipped > unclipped) | capped).float() * mask).sum()
        return LossSums(
            loss=total,
            policy=float((per_token * live).sum()),
            kl=kl_sum,
            entropy=ent_sum,
            clipped=float(was_clipped),
            ratio=float((ratio * live).sum()),
            # bounded below too: a token the policy's nucleus left (logprob -inf) is an e^-20 ratio
            logprob_abs_diff=float(torch.where(live > 0, raw_log_ratio.clamp(min=-LOG_RATIO_LIMIT).abs(), 0.0).sum()),
            tokens=float(mask.sum()),
            rows=float((row_tokens > 0).sum()),
            at_limit=float((mask - live).sum()),
        )
