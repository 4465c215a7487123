"""A plain torch/transformers rollout engine for fast tests and machines without vLLM.

Requests queue up; a background task decodes whatever is waiting as one
left-padded batch (dynamic batching), so concurrent trajectories share
forward passes. Compute runs in a worker thread, so aborts and weight loads
are accepted while a batch decodes; a weight load waits only for the batch
in progress.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import torch

from roll_agentic.engine.protocol import GenerationResult, SamplingParams


@dataclass
class _Request:
    request_id: str
    token_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future
    aborted: bool = False
    enqueued: float = field(default_factory=time.perf_counter)


# vLLM's threshold: a temperature below it means greedy decoding (argmax).
GREEDY_EPS = 1e-5


def _sample(logits: torch.Tensor, temperature: float, top_p: float,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples one token per row; returns (tokens, their logprobs under the distribution drawn from).

    The logprobs are vLLM's `processed_logprobs` (the trainer's behaviour policy):
    log-softmax of logits/temperature, renormalised over the nucleus when top_p < 1.
    Greedy (temperature ~0) takes the argmax, its logprob under the unscaled logits,
    as vLLM does; dividing by 0 made every probability nan.
    """
    if temperature < GREEDY_EPS:
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        tokens = logprobs.argmax(dim=-1)
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, V)
    if top_p < 1.0:
        sorted_lp, order = logprobs.sort(dim=-1, descending=True)
        sorted_p = sorted_lp.exp()
        keep = sorted_p.cumsum(-1) - sorted_p < top_p  # the first token is always kept
        sorted_lp = sorted_lp.masked_fill(~keep, float("-inf"))
        # Renormalised over the nucleus: the logprob of the distribution the token was drawn
        # from, not of the full one (which understated every sampled token's probability).
        logprobs = torch.log_softmax(torch.empty_like(logprobs).scatter(-1, order, sorted_lp), dim=-1)
    tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)  # (B,)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


class HFEngine:
    def __init__(self, model_path: str, max_batch: int = 64, dtype: str = "float32", seed: int = 0,
                 device: str = "cpu"):
        from transformers import AutoModelForCausalLM

        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(self.device)
        self.model.eval()
        self.pad_id = int(self.model.config.pad_token_id or 0)
        self.max_batch = max_batch
        self._version = 0
        self._pending: list[_Request] = []
        self._by_id: dict[str, _Request] = {}
        self._wakeup: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self._compute_lock = threading.Lock()  # one batch or one weight load at a time
        # One load_weights at a time, in the order they came (asyncio.Lock is FIFO). Unserialized,
        # a load that timed out at the trainer (v) still ran when v+1 came; v+1 could be read
        # and applied first and v over it: the engine went back a version.
        self._load_lock = asyncio.Lock()
        self._awake = True
        # Every draw comes from this: torch's global generator starts from the same seed in
        # every process, so each engine (and a resumed run) replayed one noise stream.
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self._closed = False
        self._stats = {"requests": 0.0, "generated_tokens": 0.0, "prompt_tokens": 0.0, "aborted": 0.0, "busy_s": 0.0}

    # -- protocol -----------------------------------------------------------------
    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str) -> GenerationResult:
        if not token_ids:
            raise ValueError("generate: token_ids is empty; a prompt needs at least one token")
        if self._closed:  # the batching loop would start again and serve a shut-down engine
            raise RuntimeError("HFEngine: the engine is shut down")
        self._ensure_loop()
        req = _Request(request_id, list(token_ids), sampling, asyncio.get_running_loop().create_future())
        self._pending.append(req)
        self._by_id[request_id] = req
        self._wakeup.set()
        try:
            return await req.future
        finally:
            self._by_id.pop(request_id, None)

    async def abort(self, request_id: str) -> None:
        req = self._by_id.get(request_id)
        if req is None:
            return
        req.aborted = True
        if req in self._pending:  # not started: answer at once and free its slot
            self._pending.remove(req)
            self._stats["aborted"] += 1
            if not req.future.done():
                req.future.set_result(GenerationResult([], [], "abort", self._version))

    async def load_weights(self, version: int, source: str) -> None:
        from safetensors.torch import load_file

        async with self._load_lock:
            state = await asyncio.to_thread(load_file, source)
            await asyncio.to_thread(self._apply_weights, state, version)

    def _apply_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        # Checked before loading: load_state_dict(strict=False) applies what it can,
        # so a refused file would otherwise leave the weights half-replaced.
        own = set(self.model.state_dict())
        tied = bool(getattr(self.model.config, "tie_word_embeddings", False))
        real_missing = [k for k in own - state.keys() if not (tied and k.endswith("lm_head.weight"))]
        unexpected = sorted(state.keys() - own)
        if real_missing or unexpected:
            raise ValueError(f"load_weights: missing {sorted(real_missing)[:3]}, unexpected {unexpected[:3]}")
        # A wrong shape fails too, but only after every other tensor was copied in.
        current = self.model.state_dict()
        wrong = [f"{k} {tuple(v.shape)} (model: {tuple(current[k].shape)})" for k, v in sorted(state.items())
                 if v.shape != current[k].shape]
        if wrong:
            raise ValueError(f"load_weights: wrong shape for {len(wrong)} tensor(s): {wrong[:3]}")
        with self._compute_lock:
            self.model.load_state_dict(state, strict=False)
            self._version = version

    def weight_version(self) -> int:
        return self._version

    async def sleep(self) -> None:
        self._awake = False

    async def wake(self) -> None:
        self._awake = True
        if self._wakeup is not None:
            self._wakeup.set()

    def stats(self) -> dict[str, float]:
        return dict(self._stats, queued=float(len(self._pending)), weight_version=float(self._version))

    def healthy(self) -> bool:
        return True  # in-process: a failed batch fails its requests, and the loop restarts on demand

    async def shutdown(self) -> None:
        """Ends every request still held (reason "abort") and stops the batching loop; idempotent.

        Cancelling the loop alone left queued requests, and those of the batch in
        progress, waiting on futures nothing would ever complete."""
        self._closed = True
        for req in list(self._by_id.values()):
            req.aborted = True  # a batch still decoding stops after its next token
            if not req.future.done():
                req.future.set_result(GenerationResult([], [], "abort", self._version))
                self._stats["aborted"] += 1
        self._pending.clear()
        if self._loop_task is not None:
            self._loop_task.cancel()

    # -- batching loop ------------------------------------------------------------
    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._wakeup = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending and self._awake:
                first = self._pending[0].sampling
                same = [r for r in self._pending if (r.sampling.temperature, r.sampling.top_p) ==
                        (first.temperature, first.top_p)][: self.max_batch]
                for r in same:
                    self._pending.remove(r)
                try:
                    results = await asyncio.to_thread(self._generate_batch, same)
                except Exception as err:  # a failed batch fails its requests, not the engine
                    for r in same:
                        if not r.future.done():
                            r.future.set_exception(err)
                    continue
                for r, res in zip(same, results, strict=True):
                    if r.aborted:
                        res.finish_reason = "abort"
                        self._stats["aborted"] += 1
                    if not r.future.done():
                        r.future.set_result(res)

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request]) -> list[GenerationResult]:
        with self._compute_lock:
            t0 = time.perf_counter()
            version = self._version
            n = len(batch)
            max_new = max(r.sampling.max_tokens for r in batch)
            lengths = [len(r.token_ids) for r in batch]
            width = max(lengths)
            ids = torch.full((n, width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((n, width), dtype=torch.long)
            for i, r in enumerate(batch):  # left padding keeps every row's last token aligned
                ids[i, width - lengths[i]:] = torch.tensor(r.token_ids)
                mask[i, width - lengths[i]:] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            out_tokens: list[list[int]] = [[] for _ in batch]
            out_lps: list[list[float]] = [[] for _ in batch]
            done = [False] * n
            reasons = ["length"] * n
            past = None
            step_ids, step_pos = ids, positions
            temperature, top_p = batch[0].sampling.temperature, batch[0].sampling.top_p
            for _ in range(max_new):
                out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                                 past_key_values=past, use_cache=True)
                past = out.past_key_values
                tokens, lps = _sample(out.logits[:, -1, :], temperature, top_p, self._generator)
                for i, r in enumerate(batch):
                    if done[i]:
                        continue
                    tok = int(tokens[i])
                    out_tokens[i].append(tok)
                    out_lps[i].append(float(lps[i]))
                    if tok in r.sampling.stop_token_ids:
                        done[i], reasons[i] = True, "stop"
                    elif len(out_tokens[i]) >= r.sampling.max_tokens or r.aborted:
                        done[i] = True
                if all(done):
                    break
                step_ids = tokens[:, None]
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            elapsed = time.perf_counter() - t0
            self._stats["requests"] += n
            self._stats["generated_tokens"] += sum(len(t) for t in out_tokens)
            self._stats["prompt_tokens"] += sum(lengths)
            self._stats["busy_s"] += elapsed
            return [GenerationResult(out_tokens[i], out_lps[i], reasons[i], version,
                                     {"queue_s": t0 - batch[i].enqueued, "compute_s": elapsed})
                    for i in range(n)]
