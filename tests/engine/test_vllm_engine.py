"""VLLMEngine's own bookkeeping around AsyncLLM, over a fake AsyncLLM (no engine core
starts): shutdown ends the requests in vLLM, and a reload that fails half way breaks the
engine instead of resuming it. The real engine's behaviour: test_engine_contract.py."""

from __future__ import annotations

import asyncio
import importlib.util
from types import SimpleNamespace

import pytest

from roll_agentic.config import EngineConfig
from roll_agentic.engine.protocol import SamplingParams

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


class _FakeLLM:
    """What VLLMEngine uses of AsyncLLM. A stream gets outputs only when the test pushes them, or
    when its request is aborted (vLLM's output processor queues an abort's last output at once);
    after shutdown nothing feeds the streams, as when AsyncLLM cancels its output handler."""

    errored = False

    def __init__(self) -> None:
        self.streams: dict[str, asyncio.Queue] = {}
        self.calls: list[str] = []
        self.reload_error: Exception | None = None
        self.prompts: dict[str, object] = {}

    async def generate(self, prompt, params, request_id: str):
        self.prompts[request_id] = prompt
        queue = self.streams[request_id] = asyncio.Queue()
        while True:
            out = await queue.get()
            yield out
            if out.outputs[0].finish_reason is not None:
                return

    def push(self, request_id: str, tokens: list[int], finish: str | None = None) -> None:
        comp = SimpleNamespace(token_ids=tokens, logprobs=[{t: SimpleNamespace(logprob=-1.0)} for t in tokens],
                               finish_reason=finish, weight_versions=None)
        self.streams[request_id].put_nowait(SimpleNamespace(outputs=[comp]))

    async def abort(self, request_ids) -> None:
        for rid in [request_ids] if isinstance(request_ids, str) else request_ids:
            if rid in self.streams:
                self.push(rid, [], "abort")

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    async def pause_generation(self, mode: str, clear_cache: bool) -> None:
        self.calls.append("pause")

    async def resume_generation(self) -> None:
        self.calls.append("resume")

    async def collective_rpc(self, method: str, args: tuple) -> None:
        self.calls.append(method)
        if self.reload_error is not None:
            raise self.reload_error

    async def update_weight_version(self, version: str) -> None:
        self.calls.append(f"label {version}")

    def get_num_unfinished_requests(self) -> int:
        return 0


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tiny_model_path: str):
    from vllm.v1.engine.async_llm import AsyncLLM

    from roll_agentic.engine import vllm_engine

    monkeypatch.setattr(AsyncLLM, "from_engine_args", lambda *a, **k: _FakeLLM())
    monkeypatch.setattr(vllm_engine.shm_sweep, "start_recording",
                        lambda: SimpleNamespace(stop=lambda: None, release=lambda: None))
    return vllm_engine.VLLMEngine(tiny_model_path, EngineConfig(backend="vllm"))


def test_shutdown_ends_requests_already_generating(engine) -> None:
    """Only requests waiting for admission were released; one already in vLLM waited for ever
    once AsyncLLM.shutdown had cancelled the task that fed its stream."""
    fake = engine._llm

    async def scenario():
        task = asyncio.ensure_future(engine.generate([1, 2, 3], SamplingParams(max_tokens=50), "r"))
        while "r" not in fake.streams:
            await asyncio.sleep(0)
        fake.push("r", [5, 6])  # two tokens made so far
        await engine.shutdown()
        done, _ = await asyncio.wait([task], timeout=30)  # the limit only keeps a regression from hanging
        return task.result() if done else None

    result = asyncio.run(scenario())
    assert result is not None, "a request in vLLM never returned after shutdown"
    assert result.finish_reason == "abort" and result.token_ids == [5, 6]
    assert fake.calls == ["shutdown"]


def test_a_reload_that_fails_half_way_breaks_the_engine(engine, tmp_path) -> None:
    """Generation resumed on weights half replaced, under the old version label."""
    fake = engine._llm
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"")
    fake.reload_error = Exception("Call to collective_rpc method failed: worker died mid-copy")
    with pytest.raises(Exception, match="mid-copy"):
        asyncio.run(engine.load_weights(1, str(path)))
    assert "resume" not in fake.calls and fake.calls[0] == "pause"
    assert not engine.healthy() and engine.weight_version() == 0
    with pytest.raises(RuntimeError, match="half way"):  # its host ends on it; Ray restarts it
        asyncio.run(engine.generate([1, 2], SamplingParams(max_tokens=2), "after"))


def test_a_reload_refused_before_any_tensor_changed_resumes_serving(engine, tmp_path) -> None:
    fake = engine._llm
    with pytest.raises(FileNotFoundError):
        asyncio.run(engine.load_weights(1, str(tmp_path / "absent.safetensors")))
    assert fake.calls == []  # refused before pausing anything
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"")
    # The worker's name and shape checks, as collective_rpc passes them on.
    fake.reload_error = Exception(f"Call to collective_rpc method failed: reload_weights_from_file({path}): "
                                  "missing ['model.norm.weight'] (1), unexpected [] (0)")
    with pytest.raises(Exception, match="missing"):
        asyncio.run(engine.load_weights(1, str(path)))
    assert fake.calls == ["pause", "reload_weights_from_file", "resume"]
    assert engine.healthy() and engine.weight_version() == 0


def test_a_request_that_raced_a_reload_is_recomputed_under_the_new_salt(engine, tmp_path) -> None:
    """A request that reached vLLM after the pause's abort sweep ran after the reload under the
    salt it was built with: its prompt reused prefix blocks the old weights had computed."""
    fake = engine._llm
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"")  # the fake reload never reads it

    async def scenario():
        task = asyncio.ensure_future(engine.generate([1, 2, 3], SamplingParams(max_tokens=50), "r"))
        while "r" not in fake.streams:
            await asyncio.sleep(0)
        await engine.load_weights(1, str(weights))  # the fake's pause aborts nothing: "r" raced it
        fake.push("r", [5, 6], "stop")  # made after the reload, over the old weights' prefix blocks
        for _ in range(10_000):  # bounded: the old code took these tokens and sent nothing more
            if "r/after-sync1" in fake.streams or task.done():
                break
            await asyncio.sleep(0)
        if "r/after-sync1" in fake.streams:
            fake.push("r/after-sync1", [7], "stop")
        done, _ = await asyncio.wait([task], timeout=30)
        return task.result() if done else None

    result = asyncio.run(scenario())
    assert result is not None and result.token_ids == [7] and result.finish_reason == "stop"
    assert fake.prompts["r"]["cache_salt"] == "weights-load0"
    assert fake.prompts["r/after-sync1"]["cache_salt"] == "weights-load1"
    assert fake.prompts["r/after-sync1"]["prompt_token_ids"] == [1, 2, 3]
