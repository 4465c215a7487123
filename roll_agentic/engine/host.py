"""The Ray actor that hosts one rollout engine and keeps its load figures.

Requests carry their task tag so the host can count prefill and decode
tokens per task; the router reads `load()` to place new trajectories.

Health: `ping` answers only for a host that serves. A client that gave up on a
request (`expire`, engine_client.py) makes the next ping wait for a one-token
probe through the engine, so a wedged engine under a living actor is not
routed to again until it answers; an engine whose process died (vLLM's engine
core) takes its host down with it, so Ray restarts both (`max_restarts`).

Sleep (`sleep`/`wake`: today only bench/reliability_load.py holds requests
back with it; meant for weight syncs) is not a fault: a sleeping engine holds
its requests until the wake, `ping` answers at once (alive; `stats()["asleep"]`
says why nothing is served) without probing a suspect engine (the probe would
wait for the wake), and time asleep does not count towards `wedged_restart_s`:
the first ping after the wake probes it. Nor towards a client's time limit: the
host counts how long each request it holds has waited on a sleeping engine
(`slept_during`), and the client extends the request's limit by that much
(engine_client.py) instead of failing it like a dead engine's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import ray

from roll_agentic import faults
from roll_agentic.cluster import freeze_startup_heap
from roll_agentic.config import EngineConfig
from roll_agentic.engine.factory import make_engine
from roll_agentic.engine.protocol import GenerationResult, SamplingParams
from roll_agentic.error_text import error_line

log = logging.getLogger(__name__)
# A suspect engine whose probe has not answered this long after its first expired
# request is wedged for good: its host exits, and Ray restarts it.
WEDGED_RESTART_S = 120.0
PROBE = SamplingParams(max_tokens=1)  # the one-token request that shows a suspect engine serves


class EngineHost:
    def __init__(self, backend: str, model_path: str, cfg: EngineConfig, seed: int = 0,
                 pool: str = "default", hardware: str = "any"):
        import torch

        torch.set_num_threads(max(1, int(os.environ.get("ROLL_AGENTIC_ENGINE_THREADS", "1"))))
        self.engine = make_engine(backend, model_path, cfg, seed=seed)
        self.pool, self.hardware = pool, hardware
        self.outstanding = 0
        self.started = time.time()
        self.busy_since: float | None = None
        self.busy_s = 0.0
        self.per_task: dict[str, dict[str, float]] = {}
        self._restore = _weights_before_restart()  # Ray restarted this actor: (version, file) it served
        self._restoring: asyncio.Future | None = None  # that reload, shared by every caller waiting on it
        # Why this restarted host lacks the weights it served (its restore failed): it refuses
        # requests and pings until a weight load succeeds. Served anyway, its initial weights
        # went out labelled version 0: every sample was dropped as stale, and a run with one
        # engine livelocked.
        self._unserved: str | None = None
        self.vocab_size = _vocab_size(model_path)
        self.expired = 0  # requests clients gave up on
        self._suspect = False  # a request expired: the next ping probes the engine
        self._suspect_since = 0.0  # when it became suspect (time.monotonic())
        self.wedged_restart_s = WEDGED_RESTART_S
        self._probe: asyncio.Future | None = None  # shared by the pings waiting on it
        self._asleep = False  # between sleep() and wake(): requests wait, and that is no fault
        self._slept_s = 0.0  # time asleep in all, sleeps that ended (time.monotonic() seconds)
        self._asleep_since: float | None = None  # when the current sleep began
        self._slept_at_arrival: dict[str, float] = {}  # request_id -> _slept_total() when it came
        self._exiting: asyncio.Future | None = None
        freeze_startup_heap()

    def _restore_pending(self) -> bool:
        return self._restore is not None or (self._restoring is not None and not self._restoring.done())

    async def _restore_weights(self) -> None:
        # A restarted actor is rebuilt from the initial model: serving it as if it were
        # the current version would feed version-0 samples to a later trainer step.
        # Every caller waits for the one reload: the requests that came while it ran
        # went to the engine at once, on the initial weights.
        if self._restoring is None:
            restore, self._restore = self._restore, None
            self._restoring = asyncio.ensure_future(self._reload(restore))
        await asyncio.shield(self._restoring)

    async def _reload(self, restore: tuple[int, str] | None) -> None:
        if restore is None:
            return
        try:
            if not Path(restore[1]).exists():
                raise FileNotFoundError(f"no file at {restore[1]}")
            await self.engine.load_weights(*restore)
        except Exception as err:  # noqa: BLE001 - the host stays up, refusing work until weights come
            self._refuse(f"restoring weights v{restore[0]} failed: {error_line(err)}")
            return
        _record_weights(*restore)

    def _refuse(self, why: str) -> None:
        self._unserved = why
        log.error("engine host: %s; refusing requests until the next weight load", why)

    def _raise_if_unserved(self) -> None:
        if self._unserved is not None:
            raise RuntimeError(f"engine host: {self._unserved}; waiting for the next weight load")

    async def generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str,
                       task: str = "") -> GenerationResult:
        self._slept_at_arrival[request_id] = self._slept_total()
        try:
            return await self._generate(token_ids, sampling, request_id, task)
        finally:
            self._slept_at_arrival.pop(request_id, None)

    async def _generate(self, token_ids: list[int], sampling: SamplingParams, request_id: str,
                        task: str) -> GenerationResult:
        faults.engine_request()
        self._check_prompt(token_ids, request_id)
        if self._restore_pending():
            await self._restore_weights()
        self._raise_if_unserved()
        if self.outstanding == 0:
            self.busy_since = time.time()
        self.outstanding += 1
        try:
            result = await self.engine.generate(token_ids, sampling, request_id)
        except Exception:
            await self._exit_if_engine_dead()
            raise
        finally:
            self.outstanding -= 1
            if self.outstanding == 0 and self.busy_since is not None:
                self.busy_s += time.time() - self.busy_since
                self.busy_since = None
        t = self.per_task.setdefault(task, {"requests": 0.0, "prefill_tokens": 0.0, "decode_tokens": 0.0})
        t["requests"] += 1
        t["prefill_tokens"] += len(token_ids)
        t["decode_tokens"] += len(result.token_ids)
        return result

    def _check_prompt(self, token_ids: list[int], request_id: str) -> None:
        # Refused here, for this request alone: inside the engine an id outside the
        # vocabulary fails the whole batch it was scheduled with (or worse, on a GPU).
        if not token_ids:
            raise ValueError(f"request {request_id}: empty prompt")
        low, high = min(token_ids), max(token_ids)
        if low < 0 or (self.vocab_size and high >= self.vocab_size):
            bad = low if low < 0 else high
            raise ValueError(f"request {request_id}: prompt token id {bad} is outside the model's "
                             f"vocabulary [0, {self.vocab_size})")

    async def generate_batch(self, requests: list[tuple[list[int], SamplingParams, str, str]],
                             linger_s: float = 0.0):
        """Several `generate` requests from one call (see engine_client.py), all submitted
        to the engine at once; yields `(request_id, result, error)` for each group that
        finishes together. Called as a Ray streaming generator; one request's error is
        its own, not the batch's.

        `linger_s`: after a request finishes while others of the batch still run, the
        ones finishing within this long leave in the same message. Each message is a
        Ray object (~1.5 ms of CPU on a 2-core machine, both ends), taken from the very
        cores the engine decodes on; the last requests of a batch never linger."""
        running = {asyncio.ensure_future(self.generate(*req)): req[2] for req in requests}
        try:
            while running:
                done, pending = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                if pending and linger_s > 0:
                    await asyncio.wait(pending, timeout=linger_s)
                    done = {fut for fut in running if fut.done()}
                out = []
                for fut in done:
                    request_id = running.pop(fut)
                    err = RuntimeError("cancelled") if fut.cancelled() else fut.exception()
                    out.append((request_id, None, f"{type(err).__name__}: {err}") if err
                               else (request_id, fut.result(), ""))
                yield out
        finally:
            for fut in running:  # the caller went away: stop generating for it
                fut.cancel()

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    async def expire(self, request_id: str) -> None:
        """A client gave up waiting for this request: frees it in the engine, and makes
        the next `ping` prove the engine still serves."""
        self.expired += 1
        if not self._suspect:
            self._suspect, self._suspect_since = True, time.monotonic()
        await self.engine.abort(request_id)

    async def load_weights(self, version: int, source: str) -> int:
        # Newer weights replace what the restarted actor had served: restored after this
        # load (by the next request or ping), the older version overwrote it.
        replaced, self._restore = self._restore, None
        if self._restoring is not None and not self._restoring.done():
            await asyncio.wait([self._restoring])
        try:
            await self.engine.load_weights(version, source)
        except Exception as err:
            if replaced is not None:  # nor restored: the engine holds its initial weights
                self._refuse(f"loading weights v{version} failed before v{replaced[0]} was restored: "
                             f"{error_line(err)}")
            # A reload that failed half way leaves the engine unhealthy (vllm_engine.py):
            # the host ends now, so that Ray restarts it from the last file it loaded.
            await self._exit_if_engine_dead(f"its engine is broken by a failed weight load: {error_line(err)}")
            raise
        self._unserved = None
        _record_weights(version, source)
        return self.engine.weight_version()

    def weight_version(self) -> int:
        return self.engine.weight_version()

    def load(self) -> int:
        return self.outstanding

    async def sleep(self) -> None:
        self._asleep = True
        if self._asleep_since is None:
            self._asleep_since = time.monotonic()
        await self.engine.sleep()

    async def wake(self) -> None:
        await self.engine.wake()
        self._asleep = False
        if self._asleep_since is not None:  # waking took time in which nothing was served, too
            self._slept_s += time.monotonic() - self._asleep_since
            self._asleep_since = None
        if self._suspect:  # time asleep was no time to answer in: the wedge clock starts now
            self._suspect_since = time.monotonic()

    def _slept_total(self) -> float:
        """Seconds this engine has spent asleep since the host started, the current sleep included."""
        return self._slept_s + (time.monotonic() - self._asleep_since if self._asleep_since is not None else 0.0)

    def slept_during(self, request_ids: list[str]) -> dict[str, float]:
        """For each of these requests the host holds: seconds the engine has been asleep
        since it arrived. A client's time limit counts only the rest (engine_client.py).
        Requests it does not hold (never arrived, or already answered) are left out."""
        now = self._slept_total()
        return {rid: now - self._slept_at_arrival[rid] for rid in request_ids if rid in self._slept_at_arrival}

    def stats(self) -> dict:
        busy = self.busy_s + (time.time() - self.busy_since if self.busy_since else 0.0)
        return {"pool": self.pool, "hardware": self.hardware, "outstanding": self.outstanding,
                "expired": self.expired, "asleep": self._asleep, "asleep_s": self._slept_total(), "busy_s": busy,
                "uptime_s": time.time() - self.started,
                "engine": self.engine.stats(), "per_task": self.per_task}

    async def shutdown(self) -> None:
        await self.engine.shutdown()
        path = _weights_file()
        if path is not None:
            path.unlink(missing_ok=True)

    async def ping(self) -> bool:
        await self._exit_if_engine_dead()
        if self._restore_pending():  # answers only once it serves the weights it had
            await self._restore_weights()
        self._raise_if_unserved()  # not routed to again before it has weights to serve
        if self._suspect and not self._asleep:
            # A live actor answers pings even when its engine is wedged: the watcher that
            # revives engines (rollout worker) would route to it again at once.
            # Not while asleep: the probe would wait for the wake (the watcher's pings
            # timed out), and past wedged_restart_s the host ended itself for sleeping.
            # Asleep it answers at once; requests routed to it wait for the wake, and a
            # still suspect engine is probed by the first ping after it.
            if self._probe is None:
                self._probe = asyncio.ensure_future(self.engine.generate([0], PROBE, f"probe-{time.time_ns()}"))
            probe = self._probe
            if (not probe.done() and time.monotonic() - self._suspect_since > self.wedged_restart_s
                    and _weights_file() is not None):
                # Wedged for good (a frozen engine process, a stuck thread): nothing in it
                # will answer again. Ending the actor is what gets it restarted by Ray;
                # before, the rollout workers' watcher pinged it for 22 minutes and gave up.
                await self._end(f"no request answered for {self.wedged_restart_s:g} s")
            try:
                await asyncio.shield(probe)  # a caller's own timeout leaves the probe running
            except Exception:  # noqa: BLE001 - the probe's failure is the ping's; the next one probes again
                await self._exit_if_engine_dead()
                if self._probe is probe:
                    self._probe = None
                raise
            self._suspect, self._probe = False, None
        return True

    async def _exit_if_engine_dead(self, why: str = "its engine is dead") -> None:
        """Ends this actor's process when its engine cannot serve again (vLLM's engine core
        died): every request to it would fail at once, it was never marked dead (an
        answered error is the request's, not the engine's), and the least-loaded router
        sent it ever more trajectories. A crashed actor is what Ray restarts and what the
        rollout workers already handle: their requests fail over, the engine is marked
        dead, and is routed to again once the restarted actor answers `ping`."""
        if self.engine.healthy() or _weights_file() is None:  # outside an actor: the error stands
            return
        await self._end(why)

    async def _end(self, why: str) -> None:
        if self._exiting is None:  # the first caller stops the engine; the others wait for the end
            self._exiting = asyncio.ensure_future(self._exit(why))
        await asyncio.shield(self._exiting)

    async def _exit(self, why: str) -> None:
        log.error("engine host: %s; exiting so that Ray restarts it", why)
        try:
            await asyncio.wait_for(self.engine.shutdown(), 20.0)  # no engine process outlives the host
        except Exception:  # noqa: BLE001 - best effort: the process ends either way
            pass
        os._exit(1)

    async def raw_tokens_per_s(self, prompts: list[list[int]], sampling: SamplingParams) -> float:
        """The same engine driven directly, in its own process: the baseline of bench engine."""
        from roll_agentic.bench.raw_engine import raw_engine_tokens_per_s

        return await raw_engine_tokens_per_s(self.engine, prompts, sampling)


def _vocab_size(model_path: str) -> int:
    """The model's vocabulary size from its config (0 if it does not say)."""
    try:
        from transformers import AutoConfig

        return int(getattr(AutoConfig.from_pretrained(model_path), "vocab_size", 0) or 0)
    except Exception:  # noqa: BLE001 - a config transformers can't read: the engine will check
        return 0


def _weights_file() -> Path | None:
    """Where this actor notes the weights it serves; None outside a Ray actor (tests)."""
    try:
        import ray

        # Without Ray up there is no actor, and get_runtime_context() would start Ray.
        actor_id = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - no Ray, no restarts to survive
        return None
    return Path(tempfile.gettempdir()) / "roll_agentic-engines" / f"{actor_id}.json" if actor_id else None


def _record_weights(version: int, source: str) -> None:
    path = _weights_file()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"version": version, "source": source}))
    os.replace(tmp, path)


def _weights_before_restart() -> tuple[int, str] | None:
    try:
        import ray

        # Outside Ray (an engine made in-process) there is no restart to recover from; and
        # get_runtime_context() would start Ray, or join a cluster a stale address file names.
        if not ray.is_initialized() or not ray.get_runtime_context().was_current_actor_reconstructed:
            return None
        rec = json.loads(_weights_file().read_text())  # type: ignore[union-attr]
        return int(rec["version"]), str(rec["source"])
    except Exception:  # noqa: BLE001 - nothing recorded: it had only the initial weights
        return None


# Ray counts every running call of an async actor against max_concurrency, waiting
# generate calls included. At Ray's default of 1,000, 1,000 requests waiting on a
# sleeping engine left no slot for the `wake` that would free them (a deadlock, seen
# in CI), and weight loads and aborts queued behind generation. Waiting calls cost
# ~50 KB each, so the limit is set where no real rollout reaches it; what bounds the
# engine's work is its own batch (`engine.max_batch`), not this.
ENGINE_ACTOR_MAX_CONCURRENCY = 100_000


def engine_actor_class(num_cpus: float = 1.0, resources: dict[str, float] | None = None):
    """EngineHost as a Ray actor; async methods let many requests wait at once."""
    return ray.remote(num_cpus=num_cpus, resources=resources or None, max_concurrency=ENGINE_ACTOR_MAX_CONCURRENCY,
                      max_restarts=1, max_task_retries=0)(EngineHost)
