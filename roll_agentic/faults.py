"""Fault injection for the reliability tests and `roll-agentic bench reliability`.

Off unless `ROLL_AGENTIC_FAULTS` is set; a run never reads it otherwise, and
every hook is a no-op returning what it was given. The spec is a comma list
of `kind:probability[:max[:after]]`, e.g.

    ROLL_AGENTIC_FAULTS="env_crash:0.05,env_hang:0.02,engine_die:0.05:1,reward_raise:0.1"

- probability: the chance that one opportunity (one env call, one generate
  request, one reward call, one checkpoint stage) turns into the fault;
- max: the most injections of this kind in the whole run, across processes
  (Ray actors restart and re-read the spec, so the budget is claimed with
  O_EXCL files in `ROLL_AGENTIC_FAULTS_DIR`; without a dir it is per process);
- after: opportunities to let pass first, per process (e.g. "kill the trainer
  in its second checkpoint write").

`ROLL_AGENTIC_FAULTS_SEED` seeds each process's draws (mixed with the kind and
pid: processes must not draw in lockstep). Each injection appends one JSON
line to `<ROLL_AGENTIC_FAULTS_DIR>/injected.jsonl`, so a harness can count
what was injected in processes it cannot see into (actors, the emulator).

Kinds: env_crash, env_hang (env calls); engine_die (EngineHost.generate);
reward_raise, reward_timeout, reward_throttle, reward_nan, reward_nonjson
(reward clients); ckpt_kill (save_checkpoint stages); train_hang (a
multiplexer's trainer slot, at the start of a step).
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_SPEC = "ROLL_AGENTIC_FAULTS"
ENV_SEED = "ROLL_AGENTIC_FAULTS_SEED"
ENV_DIR = "ROLL_AGENTIC_FAULTS_DIR"
ENV_HANG_S = "ROLL_AGENTIC_FAULTS_HANG_S"  # how long an injected hang blocks (past the timeout under test)

KINDS = ("env_crash", "env_hang", "engine_die", "reward_raise", "reward_timeout", "reward_throttle",
         "reward_nan", "reward_nonjson", "ckpt_kill", "train_hang")
REWARD_KINDS = ("reward_raise", "reward_timeout", "reward_throttle", "reward_nan", "reward_nonjson")


class InjectedFault(RuntimeError):
    """Raised by a hook; the message starts with 'injected' so logs say what it was."""


@dataclass
class Rule:
    kind: str
    probability: float
    max_count: int | None = None
    after: int = 0
    seen: int = 0  # opportunities so far in this process
    local_hits: int = 0


def parse_spec(spec: str) -> dict[str, Rule]:
    """`kind:p[:max[:after]]` items; raises ValueError with one line on anything else."""
    rules: dict[str, Rule] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        parts = item.split(":")
        if parts[0] not in KINDS or not 2 <= len(parts) <= 4:
            raise ValueError(f"{ENV_SPEC}: {item!r} is not kind:probability[:max[:after]] with kind in {KINDS}")
        try:
            p = float(parts[1])
            cap = int(parts[2]) if len(parts) > 2 and parts[2] else None
            after = int(parts[3]) if len(parts) > 3 else 0
        except ValueError as err:
            raise ValueError(f"{ENV_SPEC}: {item!r}: {err}") from None
        if not 0.0 <= p <= 1.0 or (cap is not None and cap < 0) or after < 0:
            raise ValueError(f"{ENV_SPEC}: {item!r}: probability in [0, 1], max and after >= 0")
        rules[parts[0]] = Rule(parts[0], p, cap, after)
    return rules


class Injector:
    """The spec of this process, read once; `hit(kind)` draws one opportunity."""

    def __init__(self, spec: str = "", seed: int = 0, record_dir: str = "") -> None:
        self.rules = parse_spec(spec)
        self.seed = seed
        self.dir = Path(record_dir) if record_dir else None
        self._rngs: dict[str, random.Random] = {}

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def _rng(self, kind: str) -> random.Random:
        rng = self._rngs.get(kind)
        if rng is None:
            rng = self._rngs[kind] = random.Random(f"{self.seed}:{kind}:{os.getpid()}")
        return rng

    def _claim(self, rule: Rule) -> bool:
        if rule.max_count is None:
            return True
        if self.dir is None:
            return rule.local_hits < rule.max_count
        self.dir.mkdir(parents=True, exist_ok=True)
        for i in range(rule.max_count):
            try:
                os.close(os.open(self.dir / f"{rule.kind}.{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return True
            except FileExistsError:
                continue
        return False

    def hit(self, kind: str, where: str = "") -> bool:
        rule = self.rules.get(kind)
        if rule is None:
            return False
        rule.seen += 1
        if rule.seen <= rule.after or self._rng(kind).random() >= rule.probability:
            return False
        if not self._claim(rule):
            return False
        rule.local_hits += 1
        self._record(kind, where)
        return True

    def _record(self, kind: str, where: str) -> None:
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"kind": kind, "where": where, "pid": os.getpid(), "t": time.time()}) + "\n"
        # one short O_APPEND write: lines from many processes do not interleave
        fd = os.open(self.dir / "injected.jsonl", os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


_injector: Injector | None = None


def injector() -> Injector:
    global _injector
    if _injector is None:
        _injector = Injector(os.environ.get(ENV_SPEC, ""), int(os.environ.get(ENV_SEED, "0") or 0),
                             os.environ.get(ENV_DIR, ""))
    return _injector


def reset(spec: str = "", seed: int = 0, record_dir: str = "") -> Injector:
    """Replaces this process's injector (tests); `reset()` turns injection off."""
    global _injector
    _injector = Injector(spec, seed, record_dir)
    return _injector


def read_injected(record_dir: str | Path) -> list[dict]:
    """Every injection recorded under `record_dir`, all processes."""
    path = Path(record_dir) / "injected.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hang_s() -> float:
    return float(os.environ.get(ENV_HANG_S, "3.0"))


# -- hooks: each is one line at its call site ------------------------------------------------
def env_call(fn: Callable) -> Callable:
    """An env method that may crash or hang when env faults are on (else `fn` itself)."""
    inj = injector()
    if "env_crash" not in inj.rules and "env_hang" not in inj.rules:
        return fn

    @functools.wraps(fn)
    def faulty(*args: Any, **kwargs: Any) -> Any:
        if inj.hit("env_crash", fn.__name__):
            raise InjectedFault(f"injected env crash in {fn.__name__}")
        if inj.hit("env_hang", fn.__name__):
            time.sleep(hang_s())  # a bounded block: the thread cannot be killed, only outwaited
        return fn(*args, **kwargs)

    return faulty


def engine_request() -> None:
    """Called at the start of EngineHost.generate: the engine process dies on a hit."""
    if injector().active and injector().hit("engine_die", "generate"):
        os._exit(17)  # no cleanup, like an OOM kill or a segfault


def train_step() -> None:
    """Called at the start of a trainer slot's step: it blocks for `hang_s()` on a hit
    (a wedged collective or a stuck device, as the multiplexer sees them)."""
    if injector().active and injector().hit("train_hang", "train"):
        time.sleep(hang_s())


def checkpoint_stage(stage: str) -> None:
    """Called between the steps of save_checkpoint: the trainer is SIGKILLed on a hit."""
    if injector().active and injector().hit("ckpt_kill", stage):
        os.kill(os.getpid(), signal.SIGKILL)


def reward_fn(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
    """An in-process reward function that may raise, hang, or return NaN / non-JSON."""
    inj = injector()
    if not any(k in inj.rules for k in REWARD_KINDS):
        return fn

    @functools.wraps(fn)
    def faulty(summary: dict) -> Any:
        if inj.hit("reward_raise", "local"):
            raise InjectedFault("injected reward exception")
        if inj.hit("reward_timeout", "local"):
            time.sleep(hang_s())
        if inj.hit("reward_nan", "local"):
            return float("nan")
        if inj.hit("reward_nonjson", "local"):
            return object()
        return fn(summary)

    return faulty


def invoke_fn(fn: Callable[[str, bytes], tuple[dict, bytes]]) -> Callable[[str, bytes], tuple[dict, bytes]]:
    """A Lambda Invoke that may be throttled, time out, raise in the function, or answer NaN / non-JSON."""
    inj = injector()
    if not any(k in inj.rules for k in REWARD_KINDS):
        return fn

    @functools.wraps(fn)
    def faulty(name: str, payload: bytes) -> tuple[dict, bytes]:
        from botocore.exceptions import ClientError, ReadTimeoutError

        if inj.hit("reward_throttle", "serverless"):
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "injected throttle"},
                               "ResponseMetadata": {"HTTPStatusCode": 429}}, "Invoke")
        if inj.hit("reward_timeout", "serverless"):
            raise ReadTimeoutError(endpoint_url=f"injected timeout invoking {name}")
        if inj.hit("reward_raise", "serverless"):
            body = json.dumps({"errorType": "InjectedFault", "errorMessage": "injected reward exception"})
            return {"FunctionError": "Unhandled"}, body.encode()
        if inj.hit("reward_nan", "serverless"):
            return {}, b'{"reward": NaN}'
        if inj.hit("reward_nonjson", "serverless"):
            return {}, b"\xff<html>not json"
        return fn(name, payload)

    return faulty
