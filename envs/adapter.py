"""Any gymnasium env with a `Discrete` action space, spoken to in text.

Observation -> text: the env's ansi render when it has one, else a readable
dump of the observation. Reply -> action: an action name (from the env's own
action meanings or a table of well-known envs) or an index. A reply that
names no action is an invalid action: the env is not stepped.
"""

from __future__ import annotations

import re
from numbers import Real
from typing import Any

import gymnasium as gym
import numpy as np

from roll_agentic.rollout.env_contract import EnvContractError, check_flag

# Action names of gymnasium's toy-text envs, in their action-index order.
KNOWN_ACTION_NAMES: dict[str, list[str]] = {
    "FrozenLake": ["left", "down", "right", "up"],
    "CliffWalking": ["up", "right", "down", "left"],
    "Taxi": ["south", "north", "east", "west", "pickup", "dropoff"],
    "Blackjack": ["stick", "hit"],
}
_ANSI_SPAN = re.compile(r"\x1b\[[0-9;]*m([^\x1b]*)\x1b\[0m")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(frame: str) -> str:
    """Ansi renders mark the agent with colour; keep that mark as [X] in plain text."""
    return _ANSI_ESCAPE.sub("", _ANSI_SPAN.sub(r"[\1]", frame))


def unwrapped_env(env: Any) -> Any:
    """The env under gymnasium's wrappers; a wrapped env need not subclass gym.Env, and a
    plain class has no `unwrapped` (reading it failed as a constructor error in `env check`)."""
    return getattr(env, "unwrapped", env)


def _action_names(env: gym.Env) -> list[str]:
    n = int(env.action_space.n)
    meanings = getattr(unwrapped_env(env), "get_action_meanings", None)
    if callable(meanings):
        names = [str(m).lower() for m in meanings()]
        if len(names) == n:
            return names
    spec = getattr(env, "spec", None)  # only gym.make sets one; a plain class has none
    spec_id = spec.id if spec is not None else type(unwrapped_env(env)).__name__
    for prefix, names in KNOWN_ACTION_NAMES.items():
        if spec_id.startswith(prefix) and len(names) == n:
            return names
    return [str(i) for i in range(n)]


def describe_observation(obs: Any) -> str:
    """A readable dump of an observation of any gymnasium space."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, dict):
        return "\n".join(f"{k}: {describe_observation(v)}" for k, v in obs.items())
    if isinstance(obs, tuple):
        return " ".join(describe_observation(v) for v in obs)
    if isinstance(obs, np.ndarray):
        return np.array2string(obs, precision=2, separator=" ", max_line_width=80)
    if isinstance(obs, (float, np.floating)):
        return f"{float(obs):.3g}"
    return str(obs)


class DiscreteTextAdapter(gym.Env):
    """Wraps a Discrete-action env so observations and actions are text."""

    def __init__(self, env: gym.Env):
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise TypeError(
                f"DiscreteTextAdapter needs a Discrete action space, got {env.action_space}; "
                "write a text env (observations and actions as str) for this task instead")
        self.env = env
        self.names = _action_names(env)
        self._use_ansi = getattr(env, "render_mode", None) == "ansi"
        self.observation_space = gym.spaces.Text(max_length=4096)
        self.action_space = gym.spaces.Text(max_length=256)
        alternatives = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
        self._name_re = re.compile(rf"(?<![\w]){'(' + alternatives + ')'}(?![\w])", re.IGNORECASE)
        self._int_re = re.compile(r"\d+")
        self._last_text = ""

    @property
    def action_hint(self) -> str:
        return "Answer with one of: " + ", ".join(self.names) + "."

    def _render(self, obs: Any) -> str:
        if self._use_ansi:
            frame = self.env.render()
            if isinstance(frame, str) and frame.strip():
                return strip_ansi(frame).rstrip()
        return describe_observation(obs)

    def parse_action(self, reply: str) -> int | None:
        m = self._name_re.search(reply)
        if m:
            return [n.lower() for n in self.names].index(m.group(1).lower())
        m = self._int_re.search(reply)
        if m and int(m.group()) < len(self.names):
            return int(m.group())
        return None

    def _inner(self, method: str, out: Any, size: int) -> tuple:
        """The wrapped env's result, or an error naming it: unpacking an old-gym 4-tuple
        or a bare observation failed with "cannot unpack non-iterable int object"."""
        name = type(unwrapped_env(self.env)).__name__
        if not isinstance(out, tuple) or len(out) != size or not isinstance(out[-1], dict):
            shape = "(observation, info)" if size == 2 else "(observation, reward, terminated, truncated, info)"
            raise EnvContractError(f"{name}.{method} must return {shape} with info "
                                   f"a dict (the gymnasium API), got {type(out).__name__} {out!r:.80}")
        if size == 5:
            where = f"{name}.step"
            if isinstance(out[1], bool) or not isinstance(out[1], Real):
                raise EnvContractError(f"{where}: reward must be a number, "
                                       f"got {type(out[1]).__name__} {out[1]!r:.80}")
            # step() below passes bool(terminated), bool(truncated) on: unchecked, "False" became
            # True and None False, so the contract never saw them and `env check` passed the env.
            # Checked by the contract's own rule, so both accept the same flags (numpy bools too).
            check_flag(where, "terminated", out[2])
            check_flag(where, "truncated", out[3])
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self._inner("reset", self.env.reset(seed=seed, options=options), 2)
        self._last_text = f"{self._render(obs)}\n{self.action_hint}"
        return self._last_text, dict(info)

    def step(self, action: str):
        index = self.parse_action(action)
        if index is None:
            return self._last_text, 0.0, False, False, {"invalid_action": True}
        # Discrete(n, start=s) names actions s .. s+n-1: index i is action s + i.
        obs, reward, terminated, truncated, info = self._inner(
            "step", self.env.step(int(self.env.action_space.start) + index), 5)
        self._last_text = f"{self._render(obs)}\n{self.action_hint}"
        return self._last_text, float(reward), bool(terminated), bool(truncated), dict(info)

    def close(self) -> None:
        # A wrapped env need not subclass gym.Env, so it may have no close: nothing to release.
        close = getattr(self.env, "close", None)
        if callable(close):
            close()
