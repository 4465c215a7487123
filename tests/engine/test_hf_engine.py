"""HFEngine specifics beyond the shared contract (test_engine_contract.py): sampling
randomness, shutdown, weight checks on a model whose head is not tied, and the order of
overlapping weight loads."""

from __future__ import annotations

import asyncio
import math
import tempfile
import threading
from pathlib import Path

import pytest
import torch

from roll_agentic.engine.hf_engine import HFEngine, _sample
from roll_agentic.engine.protocol import SamplingParams

PROMPT = [3, 17, 42, 99, 7]


def _tokens(model_path: str, seed: int) -> list[int]:
    async def run() -> list[int]:
        engine = HFEngine(model_path, seed=seed)
        try:
            return (await engine.generate(PROMPT, SamplingParams(max_tokens=12), "r")).token_ids
        finally:
            await engine.shutdown()

    torch.manual_seed(1234)  # the same global generator state for every engine
    return asyncio.run(run())


def test_the_seed_decides_the_sampling_noise(tiny_model_path: str) -> None:
    """Each engine gets its own seed (job.py; a resumed run new ones). The engine drew from
    torch's global generator, the same stream in every process, whatever its seed."""
    assert _tokens(tiny_model_path, seed=0) == _tokens(tiny_model_path, seed=0)
    assert _tokens(tiny_model_path, seed=0) != _tokens(tiny_model_path, seed=1)


def test_sample_reports_the_renormalised_nucleus_logprob() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.2]])
    tokens, lps = _sample(probs.log(), temperature=1.0, top_p=0.6, generator=torch.Generator().manual_seed(0))
    tok = int(tokens[0])
    assert tok in (0, 1)  # the nucleus: 0.5 + 0.3 covers 0.6
    assert math.isclose(float(lps[0]), math.log(float(probs[0, tok]) / 0.8), rel_tol=1e-5)


def test_shutdown_ends_held_requests_and_refuses_new_ones(tiny_model_path: str) -> None:
    """Cancelling the batching loop alone left every queued request waiting forever, and the
    next generate started the loop again on a shut-down engine."""

    async def scenario() -> tuple[list, Exception | None]:
        engine = HFEngine(tiny_model_path)
        await engine.sleep()  # requests queue without being decoded
        held = [asyncio.ensure_future(engine.generate(PROMPT, SamplingParams(max_tokens=4), f"h{i}"))
                for i in range(3)]
        await asyncio.sleep(0)  # they reach the queue
        await engine.shutdown()
        done, _ = await asyncio.wait(held, timeout=60)
        results = [t.result() for t in held if t in done]
        try:  # the limit only keeps a regression from hanging the suite
            await asyncio.wait_for(engine.generate(PROMPT, SamplingParams(max_tokens=4), "after"), 60)
        except RuntimeError as err:
            return results, err
        except TimeoutError:
            pass
        return results, None

    results, refused = asyncio.run(scenario())
    assert len(results) == 3 and all(r.finish_reason == "abort" and r.token_ids == [] for r in results)
    assert refused is not None and "shut down" in str(refused)


def test_untied_head_missing_from_a_weights_file_is_refused(tiny_model_path: str) -> None:
    """Only a head tied to the embeddings may be absent: an untied head left out of the
    file kept its old values while the version number moved on."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(tiny_model_path)
    config.tie_word_embeddings = False
    with tempfile.TemporaryDirectory() as d:
        model_dir = Path(d) / "untied"
        AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
        engine = HFEngine(str(model_dir))
        state = {k: v.clone() for k, v in engine.model.state_dict().items() if k != "lm_head.weight"}
        path = str(Path(d) / "weights.safetensors")
        save_file(state, path)
        with pytest.raises(ValueError, match="lm_head"):
            asyncio.run(engine.load_weights(1, path))
        assert engine.weight_version() == 0


def test_overlapping_weight_loads_apply_in_the_order_they_came(tiny_model_path: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A load the trainer gave up on (v1) was still reading its file when v2 came; v2 was read
    and applied meanwhile, then v1 over it: the engine went back to v1's weights and label."""
    import safetensors.torch

    engine = HFEngine(tiny_model_path)
    base = {k: v.clone() for k, v in engine.model.state_dict().items() if k != "lm_head.weight"}  # tied
    states = {f"v{n}": {k: v + n for k, v in base.items()} for n in (1, 2)}
    v1_reading, v1_go_on = threading.Event(), threading.Event()

    def load_file(path: str) -> dict[str, torch.Tensor]:
        if path == "v1":  # a slow read (a wedged or busy file system)
            v1_reading.set()
            v1_go_on.wait(60)
        return states[path]

    monkeypatch.setattr(safetensors.torch, "load_file", load_file)

    async def scenario() -> None:
        first = asyncio.ensure_future(engine.load_weights(1, "v1"))
        await asyncio.to_thread(v1_reading.wait, 60)
        second = asyncio.ensure_future(engine.load_weights(2, "v2"))
        await asyncio.wait([second], timeout=1.0)  # unserialized, v2 was read and applied by now
        v1_go_on.set()
        await asyncio.gather(first, second)

    asyncio.run(scenario())
    assert engine.weight_version() == 2
    assert torch.equal(engine.model.state_dict()["model.norm.weight"], states["v2"]["model.norm.weight"])
