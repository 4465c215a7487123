"""Guess the number with higher/lower feedback: a multi-turn text task.

The secret is drawn from the reset seed; every reply must contain a number in
range. Feedback after each guess says whether the secret is higher or lower and
restates the range still open, so a policy that reads the last message can
binary-search: guessing the middle of the stated range always wins within
log2(range) + 1 turns (4 for 1..8); a uniform guess inside it wins 84 % of
games, a uniform guess over 1..8 that ignores the hints 41 %.

Every info dict also counts the guesses so far and how many of them were
*consistent*: inside the range the earlier hints still allow. A reward
function can score that (rewards/guess_number.py does): it is the skill the
task teaches, and it is credited turn by turn instead of only at the end.
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
        self._lo, self._hi = low, high  # the range the hints so far allow
        self._guesses = self._consistent = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._secret = int(self.np_random.integers(self.low, self.high + 1))
        self._last = f"Guess the number from {self.low} to {self.high}."
        self._lo, self._hi = self.low, self.high
        self._guesses = self._consistent = 0
        return self._last, self._info(False)

    def _info(self, success: bool, **extra) -> dict:
        return {"success": success, "guesses": self._guesses, "consistent_guesses": self._consistent, **extra}

    def step(self, action: str):
        m = _INT_RE.search(action)
        guess = int(m.group()) if m else None
        if guess is None or not self.low <= guess <= self.high:
            self._last = f"Answer with a number from {self.low} to {self.high}."
            return self._last, 0.0, False, False, self._info(False, invalid_action=True)
        self._guesses += 1
        self._consistent += int(self._lo <= guess <= self._hi)
        if guess == self._secret:
            self._last = f"{guess} is right!"
            return self._last, 1.0, True, False, self._info(True)
        if self._secret > guess:
            hint, self._lo = "higher", max(self._lo, guess + 1)
        else:
            hint, self._hi = "lower", min(self._hi, guess - 1)
        # The hint restates the range still open, in the words of the first
        # prompt: reading the feedback is the skill, not remembering it.
        self._last = f"{guess} is wrong: the number is {hint}. Guess the number from {self._lo} to {self._hi}."
        return self._last, 0.0, False, False, self._info(False)

    def render(self) -> str:
        return self._last
