"""The batch-synchronous rollout baseline: every turn of a batch moves in lock-step.

This is how a rollout without trajectory-level asynchrony behaves: take a
batch of episodes, reset them all, then turn by turn generate one reply for
every unfinished episode (all requests of the turn sent together, so the
engine batches them; the turn ends when the slowest generation returns),
step all their environments in parallel (the turn ends when the slowest
environment returns), and repeat until the last episode of the batch ends.
Episodes that finish early leave their slot idle until the batch is over;
rewards are computed when the batch ends. Then the next batch starts.

It uses the same pieces as the asynchronous RolloutWorker (text envs,
Conversation, chat format, sampling, reward client, engine calls with the
Ray `.remote` convention), so only the schedule differs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from envs.registry import make_text_env
from roll_agentic.config import TaskConfig
from roll_agentic.engine.protocol import SamplingParams
from roll_agentic.rollout.conversation import ChatFormat, Conversation
from roll_agentic.rollout.trajectory import Trajectory, Turn


@dataclass
class SyncEpisode:
    seed: int
    group_id: str
    env: Any
    conv: Conversation
    traj: Trajectory
    obs: str = ""
    info: dict | None = None
    done: bool = False


class BatchSyncRollout:
    """Rolls out episodes `batch_size` at a time, each batch turn by turn in lock-step."""

    def __init__(self, task: TaskConfig, engines: list[Any], fmt: ChatFormat, reward_client: Any,
                 temperature: float = 1.0, top_p: float = 1.0, max_model_len: int = 1024):
        self.task, self.engines, self.fmt = task, engines, fmt
        self.reward_client = reward_client
        self.max_model_len = max_model_len
        self.sampling = SamplingParams(max_tokens=task.max_new_tokens, temperature=temperature, top_p=top_p,
                                       stop_token_ids=fmt.stop_token_ids)
        self._envs: list[Any] = []

    async def run(self, seeds: list[tuple[str, int]], batch_size: int) -> list[Trajectory]:
        """`seeds`: (group id, seed) per episode, in order; returns every finished trajectory."""
        out: list[Trajectory] = []
        for start in range(0, len(seeds), batch_size):
            out += await self.run_batch(seeds[start:start + batch_size])
        return out

    def _env(self, slot: int) -> Any:
        while len(self._envs) <= slot:  # one env per batch slot, reused batch after batch
            self._envs.append(make_text_env(self.task.env_id, self.task.env_kwargs))
        return self._envs[slot]

    async def run_batch(self, seeds: list[tuple[str, int]]) -> list[Trajectory]:
        task = self.task
        episodes = [SyncEpisode(seed, gid, self._env(i), Conversation(self.fmt),
                                Trajectory(f"{gid}-sync{i}", gid, task.name, seed, 0, max_turns=task.max_turns,
                                           format_penalty=task.format_penalty))
                    for i, (gid, seed) in enumerate(seeds)]
        t = time.perf_counter()
        resets = await asyncio.gather(*(asyncio.to_thread(e.env.reset, seed=e.seed) for e in episodes))
        reset_s = time.perf_counter() - t
        for e, (obs, info) in zip(episodes, resets, strict=True):
            e.obs, e.info = obs, info
            e.traj.env_s += reset_s  # every episode waited for the slowest reset
        for turn in range(task.max_turns):
            active = [e for e in episodes if not e.done]
            if not active:
                break
            for e in active:
                text = task.prompt_template.format(observation=e.obs) if turn == 0 and task.prompt_template else e.obs
                e.conv.add_observation(text)
            # Context full: that episode ends here (as the asynchronous worker does).
            for e in active:
                if len(e.conv.token_ids) + task.max_new_tokens > self.max_model_len:
                    e.done, e.traj.truncated = True, True
            active = [e for e in active if not e.done]
            t = time.perf_counter()
            results = await asyncio.gather(*(
                self.engines[i % len(self.engines)].generate.remote(
                    e.conv.token_ids, self.sampling, f"{e.traj.traj_id}-t{turn}", task.name)
                for i, e in enumerate(active)))
            llm_s = time.perf_counter() - t  # the barrier: the slowest generation of the batch
            replies = []
            for e, r in zip(active, results, strict=True):
                e.traj.turns.append(Turn(len(e.conv.token_ids), len(r.token_ids), r.weight_version,
                                         r.finish_reason, False, llm_s, 0.0))
                e.conv.add_reply(r.token_ids, r.logprobs)
                replies.append(self.fmt.decode(r.token_ids))
            t = time.perf_counter()
            steps = await asyncio.gather(*(asyncio.to_thread(e.env.step, reply)
                                           for e, reply in zip(active, replies, strict=True)))
            env_s = time.perf_counter() - t  # the barrier: the slowest environment of the batch
            for e, reply, (obs, reward, terminated, truncated, info) in zip(active, replies, steps, strict=True):
                invalid = bool(info.get("invalid_action", False))
                e.traj.turns[-1].invalid_action, e.traj.turns[-1].env_s = invalid, env_s
                e.traj.responses.append(reply)
                e.traj.num_invalid += int(invalid)
                e.traj.env_return += float(reward)
                e.traj.llm_s += llm_s
                e.traj.env_s += env_s
                e.obs, e.info = obs, info
                if terminated or truncated:
                    e.done = True
                    e.traj.terminated, e.traj.truncated = bool(terminated), bool(truncated)
        for e in episodes:
            if not e.done:
                e.traj.truncated = True
            tr = e.traj
            tr.success = bool((e.info or {}).get("success", tr.terminated and tr.env_return > 0))
            tr.token_ids, tr.loss_mask, tr.logprobs = e.conv.token_ids, e.conv.loss_mask, e.conv.logprobs
        outcomes = await asyncio.gather(*(self.reward_client.score(task.reward, e.traj.summary()) for e in episodes))
        for e, o in zip(episodes, outcomes, strict=True):
            e.traj.reward = float(o.value) if o.ok and o.value is not None else None
            e.traj.status = "ok" if e.traj.reward is not None else "reward_failed"
            e.traj.finished_at = time.time()
        return [e.traj for e in episodes]
