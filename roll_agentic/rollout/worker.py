"""Trajectory-level asynchronous rollout: one loop per environment instance.

A `RolloutWorker` is a CPU Ray actor hosting environments. It takes tickets
(one GRPO group each) from the buffer and runs every episode of the group as
its own coroutine: observe -> generate one request -> step the env -> ...
No episode waits for another; each is rewarded the moment it ends and handed
to the buffer on its own. An episode that falls more than alpha weight
versions behind is restarted; one whose engine dies is moved to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from envs.registry import make_text_env
from roll_agentic.cluster import freeze_startup_heap
from roll_agentic.config import RewardConfig, TaskConfig
from roll_agentic.engine.engine_client import (
    REQUEST_TIMEOUT_S,
    BatchingEngineClient,
    EngineRefusedRequest,
    EngineRequestError,
)
from roll_agentic.engine.protocol import SamplingParams
from roll_agentic.engine.router_client import CoalescingRouterClient
from roll_agentic.rollout.conversation import Conversation, chat_format_for
from roll_agentic.rollout.engine_watch import wait_until_back
from roll_agentic.rollout.env_calls import EnvCalls, EnvFailure, PromptTooLong
from roll_agentic.rollout.trajectory import Ticket, Trajectory, Turn, json_scalars

# Far more characters per token than text takes (about 4 in English, rarely 10 in code): an
# observation longer than this times the tokens left cannot fit, and is not tokenised.
MAX_CHARS_PER_TOKEN = 64

log = logging.getLogger(__name__)

MAX_RESTARTS = 3
ENGINE_RETRY_S = 0.25  # first back-off after an engine failure; doubles per attempt


class Stale(Exception):
    pass


class BufferStopped(Exception):
    """The buffer stopped before a held group's step opened: the group never starts."""


class RolloutWorker:
    def __init__(self, worker_id: int, tasks: list[TaskConfig], model_path: str, engines: list[Any],
                 router: Any, buffer: Any, alpha: int, temperature: float, top_p: float,
                 max_model_len: int, reward_cfg: RewardConfig, reward_endpoint: str,
                 groups_in_flight: int, env_step_timeout_s: float,
                 generate_timeout_s: float | None = REQUEST_TIMEOUT_S):
        from transformers import AutoTokenizer

        from roll_agentic.reward import make_reward_client

        self.worker_id = worker_id
        self.tasks = {t.name: t for t in tasks}
        self.fmt = chat_format_for(AutoTokenizer.from_pretrained(model_path))
        self.engines = engines
        # generate calls, batched per loop turn; one unanswered for generate_timeout_s of its engine
        # awake fails like a dead engine (time the engine sleeps is no fault: engine_client.py)
        self.engine_clients = [BatchingEngineClient(e, request_timeout_s=generate_timeout_s) for e in engines]
        self.router = router
        # assign/release, batched under bursts; with one engine, only told (router_client.py)
        self.routing = CoalescingRouterClient(router, only_engine=0 if len(engines) == 1 else None)
        self.buffer = buffer
        self.alpha = alpha
        self.temperature, self.top_p = temperature, top_p
        self.max_model_len = max_model_len
        self.reward_client = make_reward_client(reward_cfg, reward_endpoint)
        self.groups_in_flight = groups_in_flight
        # every env call: off the loop, under the time limit, its failure contained (env_calls.py)
        self.env_calls = EnvCalls(env_step_timeout_s)
        self._free_envs: dict[str, list[Any]] = {name: [] for name in self.tasks}
        self._closing: set[asyncio.Future] = set()  # closes of unhealthy envs under way (kept referenced)
        self._stop = False
        self._watched: dict[int, asyncio.Task] = {}  # engines this worker waits on to come back
        self._open_step = 0  # the buffer has taken at least this many steps (held tickets, buffer.py)
        self._opened_version = 0  # the weight version it served when that step opened
        self._step_waits: dict[int, asyncio.Future] = {}  # step -> its opening, shared by held episodes
        self.in_flight = 0
        self.counters = {"stale_restarts": 0, "engine_failures": 0, "env_failures": 0, "episodes": 0,
                         "aborted_episodes": 0}
        freeze_startup_heap()

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> dict:
        running: dict[asyncio.Task, Ticket] = {}
        while not self._stop:
            for g in [g for g in running if g.done()]:
                g.result()  # a group's own error is the worker's, as it always was
                del running[g]
            # A held group (its step not open yet) has reset its envs and waits: it
            # takes no slot, or the group that must finish before its step opens
            # could find every slot taken. The buffer holds at most one step's worth.
            busy = sum(1 for t in running.values() if t.opens_at_step <= self._open_step)
            if busy >= self.groups_in_flight:
                await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                continue
            # One call for every free slot: a new step's burst of groups starts at once.
            tickets = await self._next_tickets(self.groups_in_flight - busy, running)
            if tickets is None:
                break
            running.update({asyncio.ensure_future(self._run_group(t)): t for t in tickets})
        await asyncio.gather(*running)
        self.env_calls.close()
        return self.stats()

    async def stop(self) -> None:
        self._stop = True
        for fut in self._step_waits.values():  # held groups: their step will never open
            if not fut.done():
                fut.set_result(None)

    async def _step_opened(self, step: int) -> int:
        """Waits until the buffer opens `step`; the weight version it then serves.
        One buffer call per step, whichever of the worker's held episodes asks first."""
        if self._open_step >= step:
            return self._opened_version
        fut = self._step_waits.get(step)
        if fut is None:
            fut = self._step_waits[step] = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(self._wait_step(step, fut))
        version = await asyncio.shield(fut)  # a cancelled episode must not cancel the others' wait
        if version is None:
            raise BufferStopped(f"the buffer stopped before step {step} opened")
        if step > self._open_step:
            self._open_step, self._opened_version = step, version
        self._step_waits.pop(step, None)
        return version

    async def _wait_step(self, step: int, fut: asyncio.Future) -> None:
        try:
            version = await self.buffer.wait_step.remote(step)
        except Exception:  # noqa: BLE001 - the buffer is gone: as good as stopped
            version = None
        if not fut.done():
            fut.set_result(version)

    def stats(self) -> dict:
        return dict(self.counters, in_flight=self.in_flight,
                    engine_requests=sum(c.requests for c in self.engine_clients),
                    engine_calls=sum(c.calls for c in self.engine_clients))

    async def _run_group(self, ticket: Ticket) -> None:
        if ticket.round_id >= 0:
            trajs = await self._race_group(ticket)
        else:
            # Each episode runs and is rewarded on its own; the group goes to the
            # buffer in one call (it can only be trained once complete anyway).
            trajs = list(await asyncio.gather(*(self._episode(ticket, i) for i in range(ticket.group_size))))
        await self.buffer.put_many.remote(trajs)

    async def evaluate(self, task_name: str, seeds: list[int], temperature: float) -> list[dict]:
        """One episode per seed on the weights serving now, rewarded, never trained on:
        each one's outcome (`train/evaluation.py` asks and sums them up)."""
        tickets = [Ticket(f"eval-{seed}", task_name, seed, 1, -1, eval_temperature=temperature) for seed in seeds]
        trajs = await asyncio.gather(*(self._episode(t, 0) for t in tickets))
        return [{"status": t.status, "reward": t.reward, "success": t.success, "turns": t.num_turns,
                 "version": t.start_version, "error": t.error} for t in trajs]

    async def _race_group(self, ticket: Ticket) -> list[Trajectory]:
        """Tail batching: keep the first `keep` good episodes; abort the rest, or all
        of them when the round closes without this group."""
        episodes = {asyncio.ensure_future(self._episode(ticket, i)) for i in range(ticket.group_size)}
        closed = asyncio.ensure_future(self._round_closed(ticket.round_id))
        kept: list[Trajectory] = []
        good = 0
        pending = set(episodes)
        while pending and good < ticket.keep:
            done, pending = await asyncio.wait(pending | {closed}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(closed)
            for fut in done:
                if fut is closed:
                    continue
                traj = fut.result()
                kept.append(traj)
                good += traj.status == "ok"
            if closed.done():
                break
        for fut in pending:
            fut.cancel()  # each cancelled episode aborts its in-flight request
        await asyncio.gather(*pending, return_exceptions=True)
        closed.cancel()
        self.counters["aborted_episodes"] += len(pending)
        return kept

    async def _round_closed(self, round_id: int) -> None:
        await self.buffer.wait_round_closed.remote(round_id)

    # -- environments -------------------------------------------------------------------
    async def _take_env(self, task: TaskConfig) -> Any:
        free = self._free_envs[task.name]
        if free:
            return free.pop()
        # Built off the event loop under the env call limit, like every env call: a constructor
        # run on the loop (a simulator or container starting) stalled every episode of the
        # worker, and one that hung stalled them for ever. A failure is an EnvFailure (no back-off).
        try:
            # Its own kind per env: hung constructors of one env must not refuse the others'.
            return await self.env_calls(make_text_env, task.env_id, task.env_kwargs,
                                        call_kind=f"make_text_env({task.env_id})")
        except EnvFailure as err:  # an env's own constructor error need not name the env
            raise EnvFailure(f"{err} (env_id {task.env_id!r})", err.deterministic) from err

    async def _next_tickets(self, n: int, running: dict[asyncio.Task, Ticket]) -> list[Ticket] | None:
        """The buffer's next tickets, or a running group's error if one fails while we wait.

        The buffer may hold the call until a group completes: if the group that fails is
        the one it waits for (the last free place under the staleness bound), nothing else
        wakes this worker, and the trainer waited for ever."""
        call = asyncio.ensure_future(self.buffer.next_tickets.remote(n))
        while True:
            done, _ = await asyncio.wait({call, *running}, return_when=asyncio.FIRST_COMPLETED)
            for g in done:
                if g is not call and not g.cancelled() and g.exception() is not None:
                    call.cancel()
                    g.result()  # a group's own error is the worker's, as in `run`
            if call in done:
                return call.result()
            running = {g: t for g, t in running.items() if not g.done()}

    # -- one episode --------------------------------------------------------------------
    async def _episode(self, ticket: Ticket, index: int) -> Trajectory:
        task = self.tasks[ticket.task]
        traj_id = f"{ticket.group_id}-{index}-{uuid.uuid4().hex[:6]}"
        self.in_flight += 1
        t0 = time.perf_counter()
        traj: Trajectory | None = None
        error, status = "", ""
        deterministic = False  # the last attempt's failure recurs on a retry (failures.py)
        try:
            for attempt in range(MAX_RESTARTS + 1):
                try:
                    traj = await self._play(task, ticket, traj_id, attempt)
                    break
                except Stale:
                    self.counters["stale_restarts"] += 1
                    error = f"attempt {attempt + 1} fell more than alpha={self.alpha} weight versions behind its start"
                    status, deterministic = "stale", False
                except BufferStopped as err:
                    error, status = str(err), "cancelled"
                    break
                except PromptTooLong as err:
                    self.counters["env_failures"] += 1
                    error, status = str(err), "prompt_too_long"  # the buffer does not re-roll it
                    deterministic = True
                    break
                except EnvFailure as err:
                    self.counters["env_failures"] += 1
                    error, status, deterministic = str(err), "env_failed", err.deterministic
                    if deterministic:  # the env's own code raised: a replay of its turns meets it again
                        break
                except Exception as err:  # engine actor died or refused: re-route and retry
                    self.counters["engine_failures"] += 1
                    error, status = f"{type(err).__name__}: {err}", "engine_failed"
                    deterministic = False
                    if attempt < MAX_RESTARTS:  # no back-off after the last attempt: nothing follows it
                        await asyncio.sleep(ENGINE_RETRY_S * 2**attempt)  # a restarting engine needs seconds
            if traj is None:  # labelled by the last attempt's failure (a stale one was "engine_failed")
                traj = Trajectory(traj_id, ticket.group_id, task.name, ticket.seed, ticket.issued_version,
                                  status=status, error=error, deterministic=deterministic)
            else:
                await self._reward(task, traj)
        finally:
            self.in_flight -= 1
        traj.wall_s = time.perf_counter() - t0
        traj.finished_at = time.time()
        self.counters["episodes"] += 1
        return traj

    def _watch_engine(self, index: int) -> None:
        # Ray restarts a dead engine actor, but the router would keep it out for good:
        # one watcher per engine waits until it answers again, then routes to it.
        if index not in self._watched:  # the task is held here: a bare task may be collected
            self._watched[index] = asyncio.get_running_loop().create_task(self._revive(index))

    async def _revive(self, index: int) -> None:
        try:
            await wait_until_back(self.engines[index], self.router, index, lambda: self._stop)
        finally:
            self._watched.pop(index, None)

    async def _play(self, task: TaskConfig, ticket: Ticket, traj_id: str, attempt: int) -> Trajectory:
        env = await self._take_env(task)
        healthy = False
        assigned: list[int] = []

        async def engine_for(prompt_tokens: int) -> int:
            # Assigned once, when the first prompt exists: the router sizes its prefill
            # (phase-aware routing), and a slow env.reset holds no engine slot.
            if not assigned:
                assigned.append(await self.routing.assign(task.name, traj_id, prompt_tokens))
            return assigned[0]

        try:
            traj = await self._play_on(env, engine_for, task, ticket, traj_id, attempt)
            healthy = True
            return traj
        except Exception as err:
            # An engine that answered (with an error for this request) is alive: marking it
            # dead cost every trajectory on it its stickiness until the watcher revived it.
            # A ValueError is a reply refused here (`Conversation.add_reply`: logprobs missing
            # or not log-probabilities) or one the engine raised for this request: it answered.
            if assigned and not isinstance(err, (Stale, EnvFailure, EngineRefusedRequest, ValueError)):
                await self.router.mark_dead.remote(assigned[0])
                self._watch_engine(assigned[0])
            healthy = isinstance(err, Stale)
            raise
        finally:
            self.routing.release(traj_id)  # fire and forget: nothing waits on it
            if healthy:
                self._free_envs[task.name].append(env)
            else:
                # Off the event loop, under the env call limit: an env whose step hung may
                # hang in close too (a lock its stuck step holds), and on the loop that
                # stopped every episode of the worker.
                closing = asyncio.ensure_future(self._close_env(env))
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    async def _close_env(self, env: Any) -> None:
        with contextlib.suppress(Exception):  # a failed or timed-out close costs nothing more
            await self.env_calls(env.close)

    async def _play_on(self, env: Any, engine_for: Any, task: TaskConfig, ticket: Ticket,
                       traj_id: str, attempt: int) -> Trajectory:
        evaluating = ticket.eval_temperature is not None
        sampling = SamplingParams(max_tokens=task.max_new_tokens,
                                  temperature=ticket.eval_temperature if evaluating else self.temperature,
                                  top_p=self.top_p, stop_token_ids=self.fmt.stop_token_ids)
        t = time.perf_counter()
        obs, info = await self.env_calls(env.reset, seed=ticket.seed)
        env_s = time.perf_counter() - t
        conv = Conversation(self.fmt)
        traj = Trajectory(traj_id, ticket.group_id, task.name, ticket.seed, start_version=-1,
                          max_turns=task.max_turns, format_penalty=task.format_penalty, restarts=attempt)
        traj.env_s += env_s
        first = True
        opened_version = ticket.issued_version
        for turn in range(task.max_turns):
            text = task.prompt_template.format(observation=obs) if first and task.prompt_template else obs
            first = False
            before = len(conv.token_ids)
            room = self.max_model_len - before - task.max_new_tokens
            # Far more text than the context holds (an env that returns a file dump) is not
            # tokenised: that held this worker's every episode for seconds, in lists of tens
            # of millions of ids, to throw them away.
            oversized = len(text) > max(room, 0) * MAX_CHARS_PER_TOKEN
            if not oversized:
                conv.add_observation(text)
            if oversized or len(conv.token_ids) + task.max_new_tokens > self.max_model_len:
                if turn == 0:  # an "ok" episode of zero tokens crashed the trainer's batch
                    size = f"{len(text)} characters" if oversized else f"{len(conv.token_ids)} tokens"
                    raise PromptTooLong(f"task {task.name!r} seed {ticket.seed}: the first prompt ({size}) "
                                        f"+ max_new_tokens ({task.max_new_tokens}) exceeds "
                                        f"engine.max_model_len ({self.max_model_len})")
                conv.token_ids, conv.loss_mask, conv.logprobs = (conv.token_ids[:before], conv.loss_mask[:before],
                                                                 conv.logprobs[:before])
                traj.truncated = True  # the context is full: end the episode, keep what it did
                break
            if turn == 0 and ticket.opens_at_step:
                # A held ticket: envs reset and first prompt built while the trainer
                # trained; the request leaves the moment the step opens.
                opened_version = await self._step_opened(ticket.opens_at_step)
            engine_index = await engine_for(len(conv.token_ids))
            t = time.perf_counter()
            request_id = f"{traj_id}-a{attempt}-t{turn}"
            try:
                result = await self.engine_clients[engine_index].generate(conv.token_ids, sampling, request_id,
                                                                          task.name)
            except asyncio.CancelledError:
                # free the engine slot; cancelling our wait alone would not
                self.engines[engine_index].abort.remote(request_id)
                raise
            llm_s = time.perf_counter() - t
            if result.finish_reason == "abort":
                # The engine ended a request this episode did not cancel (it is shutting
                # down): a cut reply the policy never finished. Stored, it was sent to the
                # env and trained on; now the episode retries on another engine.
                raise EngineRequestError(f"engine {engine_index} aborted request {request_id} "
                                         f"after {len(result.token_ids)} tokens")
            if traj.start_version < 0:
                traj.start_version = result.weight_version
            if result.weight_version - traj.start_version > self.alpha and not evaluating:
                raise Stale()
            conv.add_reply(result.token_ids, result.logprobs)
            reply = self.fmt.decode(result.token_ids)
            t = time.perf_counter()
            obs, reward, terminated, truncated, info = await self.env_calls(env.step, reply)
            step_s = time.perf_counter() - t
            invalid = bool(info.get("invalid_action", False))
            # The prompt's length, as the trajectory's doc says (and sync_rollout records): `before`
            # is the context before this turn's observation, one observation short.
            traj.turns.append(Turn(len(conv.token_ids) - len(result.token_ids), len(result.token_ids),
                                   result.weight_version, result.finish_reason, invalid, llm_s, step_s))
            traj.responses.append(reply)
            traj.num_invalid += int(invalid)
            traj.env_return += float(reward)
            traj.llm_s += llm_s
            traj.env_s += step_s
            if terminated or truncated:
                traj.terminated, traj.truncated = bool(terminated), bool(truncated)
                break
        else:
            traj.truncated = True
        traj.success = bool(info.get("success", traj.terminated and traj.env_return > 0))
        traj.env_info = json_scalars(info)
        traj.token_ids, traj.loss_mask, traj.logprobs = conv.token_ids, conv.loss_mask, conv.logprobs
        if traj.start_version < 0:  # nothing was generated
            traj.start_version = max(ticket.issued_version, opened_version)
        return traj

    async def _reward(self, task: TaskConfig, traj: Trajectory) -> None:
        t = time.perf_counter()
        try:
            outcome = await self.reward_client.score(task.reward, traj.summary())
        except (Exception, SystemExit) as err:  # a client bug costs this trajectory (counted), not the group loop
            from roll_agentic.reward.outcome import RewardOutcome

            outcome = RewardOutcome(None, False, time.perf_counter() - t, 0, False, 0, 0.0, 0.0,
                                    f"reward client raised {type(err).__name__}: {err}")
        traj.reward_s = time.perf_counter() - t
        traj.reward_info = {"latency_s": outcome.latency_s, "retries": outcome.retries,
                            "cold_start": outcome.cold_start, "throttles": outcome.throttles,
                            "billed_ms": outcome.billed_ms, "gb_s": outcome.gb_s}
        if outcome.ok and outcome.value is not None:
            traj.reward = float(outcome.value)
            traj.status = "ok"
        else:
            traj.status = "reward_failed"  # left out of its batch and counted, never scored 0
            traj.error = outcome.error
            traj.deterministic = outcome.deterministic  # the function raised, not the service (failures.py)
