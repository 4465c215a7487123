"""A task whose episodes have long-tailed lengths: most are short, a few are 25-30x longer.

Stands in for reasoning or tool-use responses whose lengths RollPacker found
long-tailed (the longest 25-32x the median). The number of turns of an
episode is a prompt-level length (from the reset seed: some prompts are long)
times a per-response factor (each reset of the same prompt differs), so both
of tail batching's decisions matter: which prompts to defer, and which
responses of a prompt to keep. Each turn the agent is asked for a digit; a
reply with one is a valid move, and the reward is the share of valid moves.
`step_latency_s` makes each step take that long (a tool call's wall time:
the step waits, it does not compute), 0 by default.

Which response of its prompt an episode is comes from `options["response"]`,
or else from how many episodes of the same seed this process has reset
before it. A rollout worker plays all of a group's episodes, so a prompt's
responses are 0..R-1 in every run, whichever pooled env instance plays each:
the same seeds give the same lengths, and two modes compared in one
benchmark run play the same workload (counting per env instance, as before,
drew new lengths in every run: the longest-over-median of a run's steps
came out anywhere from 18.6x to 25.5x).
"""

from __future__ import annotations

import re
import time
from collections import Counter

import gymnasium as gym
import numpy as np

_DIGIT = re.compile(r"\d")
_RESETS_OF_SEED: Counter[int] = Counter()  # this process's resets per seed: the next response index


class TailTurnsEnv(gym.Env):
    def __init__(self, median_turns: float = 2.0, prompt_sigma: float = 1.2, response_sigma: float = 0.4,
                 max_turns: int = 60, step_latency_s: float = 0.0):
        if step_latency_s < 0:
            raise ValueError(f"step_latency_s must be >= 0 seconds, got {step_latency_s}")
        self.step_latency_s = step_latency_s
        self.median_turns, self.prompt_sigma, self.response_sigma = median_turns, prompt_sigma, response_sigma
        self.max_turns = max_turns
        self.observation_space = gym.spaces.Text(256)
        self.action_space = gym.spaces.Text(256)
        self._resets = 0
        self.turns = 1
        self.t = 0
        self.valid = 0

    def draw_turns(self, seed: int, response: int) -> int:
        prompt_scale = np.exp(np.random.default_rng(seed).normal(0.0, self.prompt_sigma))
        noise = np.exp(np.random.default_rng([seed, response]).normal(0.0, self.response_sigma))
        return int(np.clip(round(self.median_turns * prompt_scale * noise), 1, self.max_turns))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "response" in options:
            response = int(options["response"])
        elif seed is None:  # no prompt to number responses of: this instance's own count
            response = self._resets
        else:
            response = _RESETS_OF_SEED[int(seed)]
            _RESETS_OF_SEED[int(seed)] += 1
        self._resets += 1
        self.turns = self.draw_turns(int(seed or 0), response)
        self.t = self.valid = 0
        return "Step 1. Say a digit.", {"turns": self.turns}

    def step(self, action: str):
        if self.step_latency_s:
            time.sleep(self.step_latency_s)
        self.t += 1
        ok = bool(_DIGIT.search(action))
        self.valid += ok
        done = self.t >= self.turns
        reward = self.valid / self.turns if done else 0.0
        info = {"success": done and self.valid == self.turns}
        if not ok:
            info["invalid_action"] = True
        return f"Step {self.t + 1}. Say a digit.", reward, done, False, info
