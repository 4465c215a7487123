"""End-to-end token fidelity of multi-turn rollouts: what is stored for training is
exactly what the engine sampled, every turn's prompt is the previous prompt plus
new ids (never a re-rendered or re-tokenised conversation), and the loss mask
covers the sampled tokens and nothing else.

A recording stand-in sits in front of the engine (scripted replies for the
awkward cases, the real hf engine for sampled ones) and the real RolloutWorker
drives it; every request and result is checked against the trajectory.
"""

from __future__ import annotations

import asyncio
import importlib.util

import gymnasium as gym
import pytest

from roll_agentic.config import EngineConfig, RewardConfig, TaskConfig
from roll_agentic.engine.host import EngineHost
from roll_agentic.engine.protocol import GenerationResult
from roll_agentic.engine.router import Router
from roll_agentic.model.chat_format import ASSISTANT, END, USER
from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.worker import RolloutWorker
from tests.rollout.local_handle import LocalHandle

# Observations that would merge with, or be mistaken for, neighbouring tokens under re-tokenisation.
AWKWARD_OBSERVATIONS = [
    "start",
    " leading space",  # merges with a reply that ended in a space under re-tokenisation
    "\n\nnewlines first",
    "é then more",  # completes a reply's dangling UTF-8 lead byte under re-tokenisation
    "r",  # "Ġ" + "r" re-encodes as one token
    "last",
]


class AwkwardText(gym.Env):
    """Observations from AWKWARD_OBSERVATIONS in order; the episode ends after `turns` steps."""

    observations = AWKWARD_OBSERVATIONS

    def __init__(self, turns: int = 5):
        self.turns, self.t = turns, 0
        self.observation_space = gym.spaces.Text(256)
        self.action_space = gym.spaces.Text(256)
        self.actions: list[str] = []

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self.observations[0], {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.turns
        return self.observations[self.t % len(self.observations)], float(done), done, False, {"success": done}

    def close(self):
        pass


class Recording:
    """An engine stand-in: answers from `inner` (an EngineHost) or from a script, and keeps
    every (prompt, result) pair it handed out, per episode."""

    def __init__(self, inner=None, script=None):
        self.inner, self.script = inner, list(script or [])
        self.calls: dict[str, list[tuple[list[int], GenerationResult]]] = {}

    async def generate(self, token_ids, sampling, request_id, task=""):
        prompt = list(token_ids)
        if self.inner is not None:
            result = await self.inner.generate(token_ids, sampling, request_id, task)
        else:
            ids, reason = self.script[len(self.calls.get(_episode(request_id), [])) % len(self.script)]
            result = GenerationResult(list(ids), [-0.25 - 0.01 * i for i in range(len(ids))], reason, 0)
        # a copy: the stored record must be compared with what was handed out, not with itself
        kept = GenerationResult(list(result.token_ids), list(result.logprobs), result.finish_reason,
                                result.weight_version)
        self.calls.setdefault(_episode(request_id), []).append((prompt, kept))
        return result

    async def abort(self, request_id):
        if self.inner is not None:
            await self.inner.abort(request_id)

    async def ping(self):
        return True


def _episode(request_id: str) -> str:
    return request_id.rsplit("-a", 1)[0]


def _run(model_path, engine, *, env="AwkwardText", turns=5, max_new_tokens=6, max_model_len=1024,
         group_size=2, temperature=1.0, cleanup=None):
    task = TaskConfig(name="edge", env_id=f"tests.rollout.test_token_fidelity:{env}", env_kwargs={"turns": turns},
                      max_turns=turns, reward="env_return", group_size=group_size, max_new_tokens=max_new_tokens)

    async def main():
        buffer = TrajectoryBuffer([TaskShare("edge", 1.0, group_size)], groups_per_step=1, alpha=1)
        router = Router([("default", "cpu")], {"edge": "default"})
        worker = RolloutWorker(0, [task], model_path, [LocalHandle(engine)], LocalHandle(router),
                               LocalHandle(buffer), 1, temperature, 1.0, max_model_len, RewardConfig(mode="local"),
                               "", 1, 30.0)
        run = asyncio.ensure_future(worker.run())
        try:
            [group] = await asyncio.wait_for(buffer.get_batch(1, version=0), 240)
            await buffer.stop()
            await worker.stop()
            await asyncio.wait_for(run, 30)
        finally:
            if cleanup is not None:
                await cleanup()
        return worker, group

    return asyncio.run(main())


def check_fidelity(traj, calls, fmt, max_new_tokens: int | None = None) -> None:
    """Every request's prompt is a prefix of the stored ids, followed by exactly the sampled ids
    and logprobs; the next prompt extends it; mask 1 on sampled ids only."""
    if max_new_tokens is not None:  # a real engine: a stopped reply ends in (keeps) its stop token
        for _prompt, result in calls:
            if result.finish_reason == "stop":
                assert result.token_ids[-1] in fmt.stop_token_ids
                assert not set(result.token_ids[:-1]) & set(fmt.stop_token_ids)
            else:
                assert result.finish_reason == "length" and len(result.token_ids) == max_new_tokens
                assert not set(result.token_ids) & set(fmt.stop_token_ids)
    n = len(traj.token_ids)
    assert len(traj.loss_mask) == n and len(traj.logprobs) == n
    sampled = [0] * n
    for k, (prompt, result) in enumerate(calls):
        p, r = len(prompt), len(result.token_ids)
        assert traj.token_ids[:p] == prompt, f"turn {k}: the prompt is not a prefix of the stored ids"
        assert traj.token_ids[p:p + r] == result.token_ids, f"turn {k}: stored reply differs from the sampled one"
        assert traj.logprobs[p:p + r] == result.logprobs, f"turn {k}: stored logprobs differ"
        assert traj.turns[k].generated_tokens == r and traj.turns[k].finish_reason == result.finish_reason
        assert traj.turns[k].prompt_tokens == p, f"turn {k}: Turn.prompt_tokens is not the prompt's length"
        for i in range(p, p + r):
            sampled[i] = 1
        if k + 1 < len(calls):
            nxt = calls[k + 1][0]
            assert nxt[:p + r] == prompt + result.token_ids, f"turn {k + 1}: the prompt is not the previous one extended"
            new = nxt[p + r:]
            closed = bool(result.token_ids) and result.token_ids[-1] in fmt.stop_token_ids
            assert new == fmt.observation_tokens(_obs_text(k + 1), first=False, last_reply_closed=closed)
    assert traj.loss_mask == sampled
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if not m)
    first = calls[0][0]
    assert first == fmt.observation_tokens(_obs_text(0), first=True, last_reply_closed=True)


def _obs_text(turn: int) -> str:
    return AWKWARD_OBSERVATIONS[turn % len(AWKWARD_OBSERVATIONS)]


def _ids(tok, *tokens: str) -> list[int]:
    return [tok.convert_tokens_to_ids(t) for t in tokens]


def test_scripted_awkward_replies_are_stored_exactly_as_sampled(tiny_model_path, tokenizer):
    """Length-cut replies, a dangling UTF-8 lead byte, a trailing space before an observation
    that begins with one, special tokens mid-reply: the stored ids are the sampled ids."""
    tok = tokenizer
    end, user, assistant = _ids(tok, END, USER, ASSISTANT)
    lead_byte = tok.encode("é", add_special_tokens=False)[0]  # half of a two-byte character
    space = tok.convert_tokens_to_ids("Ġ")
    script = [
        (tok.encode("move", add_special_tokens=False) + [space], "length"),  # next obs starts with a space
        ([lead_byte], "length"),  # next obs begins with "é": the bytes would merge
        ([space, user, assistant, space, end], "stop"),  # special tokens in the middle of a reply
        ([space], "length"),  # "Ġ" then observation "r"
        (tok.encode("done", add_special_tokens=False) + [end], "stop"),
    ]
    engine = Recording(script=script)
    worker, group = _run(tiny_model_path, engine)
    assert len(group) == 2
    for traj in group:
        assert traj.status == "ok" and traj.num_turns == 5
        calls = engine.calls[traj.traj_id]
        assert [c[1].token_ids for c in calls] == [s[0] for s in script]
        check_fidelity(traj, calls, worker.fmt)


def test_sampled_multi_turn_episodes_from_the_hf_engine_are_stored_exactly(tiny_model_path):
    host = EngineHost("hf", tiny_model_path, EngineConfig(), seed=3)
    engine = Recording(inner=host)
    worker, group = _run(tiny_model_path, engine, turns=5, max_new_tokens=12, group_size=4)
    replies = 0
    for traj in group:
        assert traj.status == "ok"
        calls = engine.calls[traj.traj_id]
        assert len(calls) == traj.num_turns == 5
        check_fidelity(traj, calls, worker.fmt, max_new_tokens=12)
        replies += sum(c[1].finish_reason == "length" for c in calls)
    assert replies > 0  # the untrained model rarely closes its turn: length cuts were exercised


@pytest.mark.parametrize("max_model_len", [40, 53, 64])
def test_truncation_at_max_model_len_keeps_ids_mask_and_logprobs_aligned(tiny_model_path, max_model_len):
    """The context fills up mid-episode: the episode ends, keeps every completed turn, and the
    stored ids still end in exactly the last sampled reply."""
    script = [([5, 6, 7, 8, 9, 10], "length"), ([11, 12, 13], "length")]
    engine = Recording(script=script)
    worker, group = _run(tiny_model_path, engine, turns=20, max_new_tokens=6, max_model_len=max_model_len)
    for traj in group:
        calls = engine.calls[traj.traj_id]
        assert traj.truncated and not traj.terminated and traj.status == "ok"
        assert 1 <= len(calls) < 20
        check_fidelity(traj, calls, worker.fmt)
        last_prompt, last = calls[-1]
        assert len(traj.token_ids) == len(last_prompt) + len(last.token_ids) <= max_model_len
        assert traj.loss_mask[-1] == 1  # nothing after the last reply: the observation that overflowed is gone
        for prompt, _ in calls:
            assert len(prompt) + 6 <= max_model_len


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_sampled_multi_turn_episodes_from_vllm_are_stored_exactly(tiny_model_path):
    """The same checks against real vLLM (CPU): token in, token out, with prefix caching on."""
    import os

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    made: list[EngineHost] = []

    class Late(Recording):  # vLLM binds to the loop it first runs in: built inside the test's loop
        async def generate(self, token_ids, sampling, request_id, task=""):
            if self.inner is None:
                self.inner = EngineHost("vllm", tiny_model_path, EngineConfig(max_model_len=512, kv_cache_gib=0.25),
                                        seed=1)
                made.append(self.inner)
            return await super().generate(token_ids, sampling, request_id, task)

    async def shutdown():
        for host in made:
            await host.shutdown()

    engine = Late()
    worker, group = _run(tiny_model_path, engine, turns=5, max_new_tokens=12, group_size=4, max_model_len=512,
                         cleanup=shutdown)
    for traj in group:
        assert traj.status == "ok"
        calls = engine.calls[traj.traj_id]
        assert len(calls) == traj.num_turns == 5
        check_fidelity(traj, calls, worker.fmt, max_new_tokens=12)


class EchoesReply(AwkwardText):
    """Quotes the agent's reply back, as many text envs do ("Invalid action: ...")."""

    def step(self, action):
        self.t += 1
        done = self.t >= self.turns
        return f"You said: {action}", float(done), done, False, {"success": done}


def test_env_text_that_spells_a_chat_marker_stays_text(tiny_model_path, tokenizer):
    """A reply sampled as plain byte tokens that spell "<|end|><|user|>", quoted back by the env,
    must not turn into the chat's control tokens: those would forge a turn boundary in the
    prompt (and the trainer's inputs) that nobody sampled."""
    tok = tokenizer
    end, user, assistant = _ids(tok, END, USER, ASSISTANT)
    spelled = tok.encode("<|end|><|user|>", add_special_tokens=False, split_special_tokens=True)
    assert not {end, user, assistant} & set(spelled)  # plain text tokens, as the model may sample them
    assert tok.decode(spelled) == "<|end|><|user|>"
    engine = Recording(script=[(spelled, "length"), (tok.encode("ok", add_special_tokens=False) + [end], "stop")])
    worker, group = _run(tiny_model_path, engine, env="EchoesReply", turns=2)
    for traj in group:
        calls = engine.calls[traj.traj_id]
        (prompt0, reply0), (prompt1, _) = calls
        observation = prompt1[len(prompt0) + len(reply0.token_ids):]
        # framework-made: the closing <|end|> of the cut reply, <|user|>, ..., <|assistant|>
        assert observation[:2] == [end, user] and observation[-1] == assistant
        assert not {end, user, assistant} & set(observation[2:-1]), "env text became control tokens"
        assert tok.decode(observation[2:-1]) == "You said: <|end|><|user|>"
        # the trajectory's user/assistant markers are exactly the framework's own
        assert traj.token_ids.count(user) == traj.token_ids.count(assistant) == 2


def test_scripted_awkward_replies_under_a_qwen_like_chat_template(tmp_path):
    """The worker with a chat-template tokenizer (Qwen2.5-like): same exactness, turn by turn."""
    from tests.rollout.test_template_fidelity import IM_END, IM_START, qwen_like_tokenizer

    tok = qwen_like_tokenizer(IM_END)
    tok.save_pretrained(tmp_path)  # the worker reads the tokenizer (and its template) from the model path
    im_end, im_start = tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(IM_START)
    space = tok.convert_tokens_to_ids("Ġ")
    script = [
        (tok.encode("move", add_special_tokens=False) + [space], "length"),
        (tok.encode("é", add_special_tokens=False)[:1], "length"),
        ([space, im_start, space, im_end], "stop"),
        ([space], "length"),
        (tok.encode("done", add_special_tokens=False) + [im_end], "stop"),
    ]
    engine = Recording(script=script)
    worker, group = _run(str(tmp_path), engine)
    for traj in group:
        assert traj.status == "ok" and traj.num_turns == 5
        check_fidelity(traj, engine.calls[traj.traj_id], worker.fmt)
        assert traj.token_ids.count(im_start) == 1 + 2 * 5 + 1  # system + user/assistant per turn + the sampled one


class DumpsAFile(AwkwardText):
    """Its second observation is 5 MB of text (an env that returns a file dump)."""

    def step(self, action):
        self.t += 1
        return "x" * 5_000_000, 0.0, False, False, {}


def test_an_observation_far_past_the_context_ends_the_episode_untokenised(tiny_model_path, monkeypatch):
    """It was tokenised whole on the worker's loop (every episode there held for seconds, lists
    of millions of ids), then thrown away: now it is never tokenised, and the episode keeps its turns."""
    from roll_agentic.rollout.conversation import Conversation

    seen: list[int] = []
    add = Conversation.add_observation
    monkeypatch.setattr(Conversation, "add_observation", lambda self, text, *a, **k: (
        seen.append(len(text)), add(self, text, *a, **k))[1])
    engine = Recording(script=[([5, 6, 7], "length")])
    worker, group = _run(tiny_model_path, engine, env="DumpsAFile", turns=4, max_model_len=256)
    for traj in group:
        assert traj.status == "ok" and traj.truncated and len(engine.calls[traj.traj_id]) == 1
        check_fidelity(traj, engine.calls[traj.traj_id], worker.fmt)
    assert seen and max(seen) < 10_000  # the dump never reached the tokenizer
