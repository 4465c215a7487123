"""A single-turn, zero-latency text env: one prompt, one reply, done.

Used to measure the framework's own overhead (bench engine) and under load:
the env costs nothing, so what is measured is generation plus plumbing.
"""

from __future__ import annotations

import gymnasium as gym


class SingleTurnPrompt(gym.Env):
    def __init__(self, words: int = 12):
        self.words = words
        self.observation_space = gym.spaces.Text(1024)
        self.action_space = gym.spaces.Text(4096)
        self._prompt = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        vocab = ["left", "right", "up", "down", "number", "guess", "row", "col", "the", "is"]
        picks = self.np_random.integers(0, len(vocab), self.words)
        self._prompt = "Continue: " + " ".join(vocab[i] for i in picks)
        return self._prompt, {}

    def step(self, action: str):
        return self._prompt, 1.0, True, False, {"success": True}
