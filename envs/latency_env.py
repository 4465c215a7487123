"""A long-tail agentic workload as a text env: slow, heavy-tailed steps and varying lengths.

Stands in for tool-using tasks (SWE, web) whose environment steps are mostly
quick but sometimes very slow, and whose episodes differ in length. Every
random figure is drawn at reset from the reset seed alone, so the same seed
gives the same episode (number of turns, latency of each step) whatever
order or concurrency it is run in: two rollout schedulers driven with the
same seeds face exactly the same work.

Latency distributions (seconds, capped at `latency_cap_s`):
- "lognormal": exp(N(log(latency_median_s), latency_sigma))
- "pareto": latency_median_s * 2**(-1/pareto_shape) * (1 + Pareto(pareto_shape)),
  scaled so its median is latency_median_s; shape <= 2 has infinite variance.

The agent is asked for a number each turn; any reply with a digit counts as a
valid move (reward 1/turns per valid move), anything else is an invalid
action. The episode ends after its drawn number of turns, a success when
every move was valid.
"""

from __future__ import annotations

import re
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

_DIGIT = re.compile(r"\d")


class LongTailEnv(gym.Env):
    metadata = {"render_modes": ["ansi"]}

    def __init__(self, min_turns: int = 2, max_turns: int = 8, latency_median_s: float = 0.05,
                 latency_sigma: float = 1.0, latency_cap_s: float = 2.0, distribution: str = "lognormal",
                 pareto_shape: float = 1.5, reset_latency_s: float = 0.0, filler_words: int = 8,
                 sleep: bool = True, render_mode: str | None = "ansi"):
        if not 1 <= min_turns <= max_turns:
            raise ValueError(f"LongTailEnv: need 1 <= min_turns <= max_turns, got {min_turns}, {max_turns}")
        if distribution not in ("lognormal", "pareto"):
            raise ValueError(f"LongTailEnv: distribution must be lognormal or pareto, got {distribution!r}")
        if latency_median_s < 0 or latency_cap_s < 0:
            raise ValueError("LongTailEnv: latencies must be >= 0")
        self.min_turns, self.max_turns = min_turns, max_turns
        self.latency_median_s, self.latency_sigma, self.latency_cap_s = latency_median_s, latency_sigma, latency_cap_s
        self.distribution, self.pareto_shape = distribution, pareto_shape
        self.reset_latency_s = reset_latency_s
        self.filler_words = filler_words  # observation length: how fast the context grows per turn
        self.sleep = sleep  # False: report latencies in info without waiting (simulators, unit tests)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=1024)
        self.action_space = spaces.Text(max_length=256)
        self.turns = min_turns
        self.latencies: list[float] = []
        self.t = 0
        self.valid = 0  # valid replies this episode
        self._last = ""

    def _draw_latencies(self, rng: np.random.Generator, n: int) -> list[float]:
        if self.distribution == "lognormal":
            raw = rng.lognormal(np.log(max(self.latency_median_s, 1e-9)), self.latency_sigma, n)
        else:  # Lomax shifted to start at 1, rescaled so the median is latency_median_s
            raw = self.latency_median_s * 2 ** (-1 / self.pareto_shape) * (1 + rng.pareto(self.pareto_shape, n))
        return [float(min(x, self.latency_cap_s)) for x in raw]

    def _observation(self, text: str) -> str:
        filler = " ".join(f"w{(self.t * 7 + i) % 97}" for i in range(self.filler_words))
        return f"{text} Log: {filler}. Reply with a number."

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        self.turns = int(rng.integers(self.min_turns, self.max_turns + 1))
        self.latencies = self._draw_latencies(rng, self.turns)
        self.t = self.valid = 0
        if self.sleep and self.reset_latency_s > 0:
            time.sleep(self.reset_latency_s)
        self._last = self._observation(f"Task of {self.turns} steps begins.")
        return self._last, {"success": False, "turns": self.turns}

    def step(self, action: str):
        latency = self.latencies[self.t] if self.t < len(self.latencies) else 0.0
        if self.sleep and latency > 0:
            time.sleep(latency)  # the environment is busy (a build, a page load, a test run)
        self.t += 1
        valid = bool(_DIGIT.search(action))
        self.valid += valid
        done = self.t >= self.turns
        self._last = self._observation(f"Step {self.t} of {self.turns} {'done' if valid else 'rejected'}.")
        # Success is finishing with every move valid, as envs/tail_turns.py has it: `done` alone
        # counted an episode of nothing but invalid replies a success in the summary and metrics.
        success = done and self.valid == self.turns
        info = {"invalid_action": not valid, "success": success, "latency_s": latency}
        return self._last, (1.0 / self.turns if valid else 0.0), done, False, info

    def render(self) -> str:
        return self._last
