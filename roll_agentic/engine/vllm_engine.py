"""The vLLM rollout engine: `AsyncLLM` behind the RolloutEngine protocol.

One `generate` call is one vLLM request (token ids in, token ids and their
sampling logprobs out). vLLM batches whatever is in flight; this class only
adds what RL needs on top:

- Sampling semantics equal to `HFEngine`: only `stop_token_ids` stop a
  request (`ignore_eos`), the tokenizer is never used (token in, token out),
  and logprobs are vLLM's `processed_logprobs`, i.e. log-softmax of the
  temperature-scaled logits the token was drawn from (with top_p < 1 the
  nucleus is renormalised: the true behaviour policy).
- Versioned weight sync that pauses generation only for the reload itself
  (MECHANISMS R4): in-flight requests are aborted with the tokens made so far,
  the weights are reloaded in place, vLLM's weight-version label is set, the
  scheduler resumes, and each interrupted request goes on as a new vLLM request
  whose prompt is everything so far, so its KV cache is recomputed with the new
  weights. Its result says where it resumed (`resumed_at_token`) and under
  which version it ended (`weight_version_end`).
- Prefix caching stays correct across syncs: every prompt carries the
  identity of the weights it runs on as `cache_salt` (a count of loads, not
  the version: the multiplexer's jobs each count versions from 0 on shared
  engines, and job B's v3 reused the KV blocks of job A's v3), so a request
  never reuses KV blocks computed with other weights (a plain cache reset is
  refused while requests hold blocks).
- `sleep()/wake()`: vLLM's sleep mode is a no-op on CPU, so here they hold
  and release admission of new requests; running ones finish. On CUDA,
  `sleep(level=1)` could additionally offload weights: not wired yet.

Weight sources: a safetensors file with Hugging Face parameter names (any
platform; see vllm_extension.py), or, on CUDA, a `vllm-transfer:` payload for
vLLM's own NCCL/IPC weight-transfer engines (bottom of this file).

Start-up takes 35-50 s on a 2-core CPU (vLLM spawns its engine-core process
with multiprocessing "spawn": scripts need an `if __name__ == "__main__":`
guard). Use it from one event loop; call `shutdown()` to stop the engine-core
processes. vLLM's shared-memory queues (/dev/shm/psm_*) of an engine killed
without `shutdown()` are unlinked by the next engine start (shm_sweep.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

from roll_agentic.config import EngineConfig
from roll_agentic.engine import shm_sweep
from roll_agentic.engine.engine_reaper import engine_processes, reap
from roll_agentic.engine.protocol import GenerationResult, SamplingParams
from roll_agentic.engine.vllm_extension import refusal_prefix
from roll_agentic.engine.vllm_logging import quiet_expected_warnings

log = logging.getLogger(__name__)

EXTENSION = "roll_agentic.engine.vllm_extension.WeightReloadExtension"
TRANSFER_PREFIX = "vllm-transfer:"  # load_weights source carrying a weight-transfer payload
_GIB = 1 << 30
# vLLM streams a request's output after its first token, then every this many
# tokens, and at its end (an abort included, with every token not yet sent).
# Nothing here reads the tokens in between, and each output costs the engine's
# process a RequestOutput and a wake-up of the request's coroutine: per token of
# 128 running requests, CPU taken from the engine core on a small machine.
FIRST_AND_LAST_ONLY = 1 << 30


class VLLMEngine:
    def __init__(self, model_path: str, cfg: EngineConfig, seed: int = 0, *,
                 dtype: str | None = None, weight_transfer_backend: str | None = None):
        """Starts vLLM's engine core (blocking, tens of seconds on CPU).

        dtype: None = float32 on CPU (vLLM's CPU kernels and exact logprob
        parity with the trainer), "auto" elsewhere.
        weight_transfer_backend: CUDA only, e.g. "nccl" or "ipc"; enables the
        `vllm-transfer:` sources of `load_weights` (see `init_weight_transfer`).
        """
        quiet_expected_warnings()  # before vLLM's first import here configures its logging
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        self.on_cpu = bool(current_platform.is_cpu())
        kwargs: dict[str, Any] = {}
        if self.on_cpu:
            # The explicit byte count wins over vLLM's automatic sizing; the legacy
            # VLLM_CPU_KVCACHE_SPACE env var (whole GiB) would override it again.
            if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                log.warning("VLLM_CPU_KVCACHE_SPACE is set and overrides engine.kv_cache_gib")
            kwargs["kv_cache_memory_bytes"] = int(cfg.kv_cache_gib * _GIB)
        else:
            kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
        if weight_transfer_backend:
            kwargs["weight_transfer_config"] = {"backend": weight_transfer_backend}
        args = AsyncEngineArgs(
            model=model_path,
            dtype=dtype or ("float32" if self.on_cpu else "auto"),
            seed=seed,
            max_model_len=cfg.max_model_len,
            enable_prefix_caching=cfg.enable_prefix_caching,
            enforce_eager=self.on_cpu,  # no torch.compile start-up on CPU; CUDA graphs on GPU
            skip_tokenizer_init=True,  # token in, token out
            generation_config="vllm",  # ignore the checkpoint's sampling defaults
            logprobs_mode="processed_logprobs",
            worker_extension_cls=EXTENSION,
            disable_log_stats=True,
            use_tqdm_on_load=False,  # a progress bar per engine start in the run's output
            **kwargs,
        )
        self.cfg = cfg
        # vLLM's shared-memory queues (/dev/shm/psm_*) outlive an engine killed without
        # shutdown: this start records its own and sweeps those of engines now gone.
        self._shm = shm_sweep.start_recording()
        try:
            self._llm: Any = AsyncLLM.from_engine_args(args)
        except BaseException:  # a failed or interrupted start-up: vLLM does not unlink them
            shm_sweep.release_after_failed_start(self._shm)
            raise
        self._shm.stop()
        self._version = 0
        self._loads = 0  # weight loads so far: the prefix cache's salt
        self._transfer_ready = False
        self._closed = False
        self._awake = True
        self._reloading = False
        self._broken: str | None = None  # a reload failed half way: weights neither old nor new
        self._gate: asyncio.Event | None = None  # created in the loop that uses the engine
        self._reload_lock: asyncio.Lock | None = None
        self._waiting: dict[str, bool] = {}  # held at admission -> aborted?
        self._running: dict[str, bool] = {}  # submitted to vLLM -> abort asked?
        self._segments: dict[str, str] = {}  # request -> its vLLM request now (resumed after a sync)
        self._pauses = 0  # weight syncs begun: a request aborted across one goes on
        self._stats = {"requests": 0.0, "generated_tokens": 0.0, "prompt_tokens": 0.0,
                       "aborted": 0.0, "reloads": 0.0, "reload_s": 0.0, "straddled": 0.0,
                       "recomputed": 0.0}

    # -- protocol -----------------------------------------------------------------
    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str) -> GenerationResult:
        if not token_ids:
            raise ValueError("generate: token_ids is empty; a prompt needs at least one token")
        self._live()  # refuse new work after shutdown
        t_enq = time.perf_counter()
        if not await self._admit(request_id):
            self._stats["aborted"] += 1
            return GenerationResult([], [], "abort", self._version, {"queue_s": time.perf_counter() - t_enq})
        version = self._version
        tokens: list[int] = []
        logprobs: list[float] = []
        t0 = time.perf_counter()
        timings = {"queue_s": t0 - t_enq}
        self._running[request_id] = False
        try:
            segment = 0
            while True:
                pauses = self._pauses
                reason, spans = await self._segment(token_ids, tokens, logprobs, sampling,
                                                    request_id if segment == 0 else f"{request_id}/after-sync{segment}")
                # A weight sync aborted it mid-reply (R4: suspend, update, resume): it goes
                # on under the new weights from a prompt of everything so far, so its KV
                # cache is recomputed with them (a new cache salt: no block of the old
                # weights matches). Its caller's abort, or a finished reply, ends it.
                if (reason != "abort" or self._running[request_id] or self._pauses == pauses
                        or len(tokens) >= sampling.max_tokens):
                    break
                segment += 1
                timings.setdefault("resumed_at_token", float(len(tokens)))
                self._stats["recomputed"] += 1
                if not await self._admit(request_id):  # the sync's end; False: aborted while waiting
                    break
        finally:
            self._running.pop(request_id, None)
            self._segments.pop(request_id, None)
        timings["compute_s"] = time.perf_counter() - t0
        last = _last_version(spans, version)
        if last != version:  # the request spanned a weight sync: later tokens are newer
            timings["weight_version_end"] = float(last)
            self._stats["straddled"] += 1
        self._stats["requests"] += 1
        self._stats["generated_tokens"] += len(tokens)
        self._stats["prompt_tokens"] += len(token_ids)
        if reason == "abort":
            self._stats["aborted"] += 1
        return GenerationResult(tokens, logprobs, reason, version, timings)

    async def _segment(self, token_ids: list[int], tokens: list[int], logprobs: list[float],
                       sampling: SamplingParams, vllm_id: str) -> tuple[str, Any]:
        """One vLLM request continuing `token_ids + tokens`; appends its output, returns its
        finish reason and its tokens' weight-version spans."""
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        # DELTA outputs: each step's new tokens, so an abort that raced the request's
        # registration in vLLM can be re-sent once the request demonstrably exists.
        params = VSampling(max_tokens=sampling.max_tokens - len(tokens), temperature=sampling.temperature,
                           top_p=sampling.top_p, stop_token_ids=list(sampling.stop_token_ids),
                           ignore_eos=True, logprobs=0, detokenize=False,
                           output_kind=RequestOutputKind.DELTA, stream_interval=FIRST_AND_LAST_ONLY)
        loads = self._loads
        prompt = TokensPrompt(prompt_token_ids=[*token_ids, *tokens], cache_salt=f"weights-load{loads}")
        request_id = vllm_id.split("/after-sync", 1)[0]
        self._segments[request_id] = vllm_id  # what abort() must name in vLLM now
        reason, spans, resent, stale = "abort", None, False, False
        recompute = self.cfg.sync_in_flight == "recompute"
        async for out in self._live().generate(prompt, params, request_id=vllm_id):
            comp = out.outputs[0]
            if recompute and self._loads != loads and not stale:
                # A weight load began after this prompt took its salt. A request that reached
                # vLLM after the pause's abort sweep was not aborted: it ran after the reload
                # under the old salt, over prefix blocks the old weights computed. Its output
                # is dropped and it is aborted: `generate` goes on from a prompt with the new
                # salt (so does an output made before the pause and read after: only re-done).
                stale = True
                await self._live().abort(vllm_id)
            if stale:
                continue  # until vLLM ends the stream
            for pos, tok in zip(comp.logprobs or [], comp.token_ids, strict=True):
                tokens.append(int(tok))
                logprobs.append(float(pos[tok].logprob))
            if comp.finish_reason is not None:
                reason, spans = comp.finish_reason, comp.weight_versions
            elif self._running[request_id] and not resent:  # aborted before vLLM knew the request
                resent = True
                await self._live().abort(vllm_id)
        return ("abort", None) if stale else (reason, spans)

    async def abort(self, request_id: str) -> None:
        """Ends that request only; its caller gets the tokens made so far, reason "abort"."""
        if request_id in self._waiting:
            self._waiting[request_id] = True
            self._gate_event().set()  # wake it so it can leave
            return
        if request_id in self._running:
            self._running[request_id] = True  # re-sent by generate if this one came too early
        if self._llm is not None:
            await self._llm.abort(self._segments.get(request_id, request_id))

    async def load_weights(self, version: int, source: str) -> None:
        """Serves `source` as `version`: a safetensors path (HF names), or a
        `vllm-transfer:` payload on CUDA. Generation pauses only for the reload.
        A failure once tensors may have changed breaks the engine (`healthy()`)."""
        if self._reload_lock is None:
            self._reload_lock = asyncio.Lock()
        async with self._reload_lock:
            if source.startswith(TRANSFER_PREFIX) and not self._transfer_ready:
                raise RuntimeError("load_weights(vllm-transfer:...): call init_weight_transfer first")
            if not source.startswith(TRANSFER_PREFIX) and not os.path.isfile(source):
                raise FileNotFoundError(f"load_weights: no safetensors file at {source}")
            t0 = time.perf_counter()
            self._reloading = True  # new requests wait: their cache salt must name the new weights
            try:
                # R4 ("recompute"): in-flight requests are aborted with the tokens made so
                # far and go on after the reload from a prompt of all of them (generate), so
                # their KV cache is recomputed with the new weights. "keep" freezes them and
                # goes on over KV blocks the old weights computed (engine.sync_in_flight).
                self._pauses += 1
                mode = "abort" if self.cfg.sync_in_flight == "recompute" else "keep"
                await self._live().pause_generation(mode=mode, clear_cache=False)
                # A new salt before any weight changes (even a reload that fails half way):
                # no prefix cached with earlier weights matches a later request.
                self._loads += 1
                try:
                    if source.startswith(TRANSFER_PREFIX):
                        await self._transfer_update(source[len(TRANSFER_PREFIX):])
                    else:
                        await self._live().collective_rpc("reload_weights_from_file", args=(source,))
                    await self._live().update_weight_version(str(version))
                    self._version = version
                except BaseException as err:  # a cancelled load too: the reload runs on in vLLM
                    # Resumed, it served half-replaced weights under the old label; broken, its host
                    # ends and Ray restarts it. The worker's name/shape checks precede any change.
                    if refusal_prefix(source) not in str(err):
                        self._broken = f"weights v{version} failed half way ({type(err).__name__}: {err})"
                        log.error("VLLMEngine: %s; generation stays paused", " ".join(self._broken.split()))
                    raise
                finally:
                    if self._broken is None:
                        await self._live().resume_generation()
            finally:
                self._reloading = False
                self._gate_event().set()
            self._stats["reloads"] += 1
            self._stats["reload_s"] += time.perf_counter() - t0

    def weight_version(self) -> int:
        return self._version

    async def sleep(self) -> None:
        """Holds new requests until `wake()`; running ones finish (CPU has no sleep mode)."""
        self._awake = False
        self._gate_event().clear()

    async def wake(self) -> None:
        self._awake = True
        self._gate_event().set()

    async def reset_prefix_cache(self) -> bool:
        """Forgets every cached prefix (benchmarks: a measured run must prefill like a fresh one).
        False when vLLM could not (requests still running hold their blocks)."""
        return bool(await self._live().reset_prefix_cache())

    def stats(self) -> dict[str, float]:
        return dict(self._stats, weight_version=float(self._version),
                    running=float(len(self._running)), queued=float(len(self._waiting)),
                    unfinished=float(self._llm.get_num_unfinished_requests() if self._llm else 0))

    def healthy(self) -> bool:
        """False once vLLM's engine core process died (vLLM cannot restart it): from
        then on every request fails with EngineDeadError; or once a reload failed half
        way. Shut down counts as healthy: it was asked for."""
        return self._llm is None or (not self._llm.errored and self._broken is None)

    async def shutdown(self) -> None:
        """Ends every request still held (reason "abort", as HFEngine's) and stops the
        engine-core and worker processes; idempotent."""
        if self._closed:
            return
        self._closed = True
        for rid in list(self._waiting):
            self._waiting[rid] = True
        self._gate_event().set()
        # AsyncLLM.shutdown cancels the task feeding the streams of requests in vLLM: they
        # never returned. Aborted, each stream gets its last output at once, the tokens so far.
        in_flight = [self._segments.get(rid, rid) for rid in self._running]
        try:
            if in_flight:
                await asyncio.wait_for(self._llm.abort(in_flight), 10.0)
        except Exception as err:  # noqa: BLE001 - e.g. a dead engine core: it shuts down regardless
            log.warning("VLLMEngine.shutdown: aborting %d request(s) failed: %s", len(in_flight), err)
        llm, self._llm = self._llm, None
        procs = engine_processes()
        # vLLM sends SIGTERM and, after a 5 s grace, kills the process tree: on a
        # small CPU box the engine core and worker spend longer than that in the
        # interpreter's exit-time GC, so the kill is the usual end. Blocking the loop
        # for it is fine: nothing else runs on a shut-down engine.
        llm.shutdown()
        # Drop the last reference now: AsyncLLM.__del__ calls shutdown again, which
        # is harmless here but fails if it first runs at interpreter teardown.
        del llm
        await reap(procs)
        self._shm.release()  # what vLLM did not unlink itself (it does on a clean exit)

    def _live(self) -> Any:
        if self._llm is None:
            raise RuntimeError("VLLMEngine: the engine is shut down")
        if self._broken is not None:  # new work fails at once: its host ends on it
            raise RuntimeError(f"VLLMEngine: {self._broken}")
        return self._llm

    # -- admission ----------------------------------------------------------------
    def _gate_event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        return self._gate

    async def _admit(self, request_id: str) -> bool:
        """Waits while asleep or reloading; False if aborted meanwhile."""
        gate = self._gate_event()
        self._waiting[request_id] = False
        try:
            while not self._waiting[request_id] and not self._closed:
                if self._awake and not self._reloading:
                    return True
                gate.clear()
                await gate.wait()
            return False
        finally:
            self._waiting.pop(request_id, None)

    # -- CUDA: vLLM's weight-transfer engines (cannot run on CPU) -------------------
    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """Joins the trainer's transfer group (e.g. NCCL rendezvous); once per engine.

        The trainer side is vLLM's `NCCLTrainerWeightTransferEngine` /
        `IPCTrainerWeightTransferEngine`; it calls this (via a client routed to
        this engine) concurrently with opening its own endpoint.
        """
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        if self.on_cpu:
            raise RuntimeError("vLLM weight transfer needs CUDA; on CPU pass a safetensors path")
        await self._live().init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))
        self._transfer_ready = True

    async def _transfer_update(self, payload: str) -> None:
        """One update round: `payload` is the JSON `update_info` the trainer engine
        builds (names, dtypes, shapes, + IPC handles for "ipc"); the trainer
        broadcasts the tensors while this call waits in the receive."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await self._live().start_weight_update()
        try:
            await self._live().update_weights(WeightTransferUpdateRequest(update_info=json.loads(payload)))
        finally:
            await self._live().finish_weight_update()


def _last_version(spans: list[Any] | None, default: int) -> int:
    """The version label of the last token, from vLLM's per-token version spans."""
    if not spans:
        return default
    try:
        return int(spans[-1].version)
    except ValueError:  # vLLM's initial label is "default": our version 0
        return default
