"""Guess the number with higher/lower feedback: a multi-turn text task.

The secret is drawn from the reset seed; every reply must contain a number in
range. Feedback after each guess says whether the secret is higher or lower,
so a policy that reads the conversation can binary-search.
"""

from __future__ import annotations

import re

import gymnasium as gym
from gymnasium import spaces

_INT_RE = re.compile(r"-?\d+")


class GuessNumber(gym.Env):
    metadata = {"render_modes": ["ansi"]}

    def __init__(self, low: int = 1, high: int = 8, render_mode: str | None = "ansi"):
        if high <= low:
            raise ValueError(f"GuessNumber: high must exceed low, got low={low} high={high}")
        self.low, self.high = low, high
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=256)
        self.action_space = spaces.Text(max_length=64)
        self._secret = low
        self._last = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(self.low, self.high + 1))
        self._last = f"Guess the number from {self.low} to {self.high}."
        return self._last, {"success": False}

    def step(self, action: str):
        m = _INT_RE.search(action)
        guess = int(m.group()) if m else None
        if guess is None or not self.low <= guess <= self.high:
            self._last = f"Answer with a number from {self.low} to {self.high}."
            return self._last, 0.0, False, False, {"invalid_action": True, "success": False}
        if guess == self._secret:
            self._last = f"{guess} is right!"
            return self._last, 1.0, True, False, {"success": True}
        hint = "higher" if self._secret > guess else "lower"
        self._last = f"{guess} is wrong. The number is {hint}."
        return self._last, 0.0, False, False, {"success": False}

    def render(self) -> str:
        return self._last
