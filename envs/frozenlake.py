"""FrozenLake as a text environment: the agent reads a grid and answers a move.

Wraps gymnasium's FrozenLake-v1 (non-slippery by default) so the dynamics are
gymnasium's own; this class only renders the state as text and parses the
reply. An unparseable reply is an invalid action: the turn is spent, the
state does not change and `info["invalid_action"]` is set. Every step's
info also says how far the agent has come (`progress`: the share of the
start's Manhattan distance to the goal covered, 0 once in a hole), which the
shipped reward uses as a shaping term (rewards/frozenlake.py).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

MOVES = ("left", "down", "right", "up")  # FrozenLake-v1's action order
_MOVE_RE = re.compile(r"\b(left|down|right|up)\b", re.IGNORECASE)
FIXED_MAPS = {
    3: ["SFH", "FFF", "FFG"],
    4: ["SFFF", "FHFH", "FFFH", "HFFG"],
}


def parse_move(reply: str) -> int | None:
    """The first move named in the reply, or None."""
    m = _MOVE_RE.search(reply)
    return MOVES.index(m.group(1).lower()) if m else None


class FrozenLakeText(gym.Env):
    """Reach G from S without stepping into a hole H; reward 1 at the goal."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, size: int = 3, random_map: bool = False, is_slippery: bool = False,
                 render_mode: str | None = "ansi"):
        if size < 2:
            raise ValueError(f"FrozenLakeText: size must be >= 2, got {size}")
        if not random_map and size not in FIXED_MAPS:
            raise ValueError(f"FrozenLakeText: fixed maps exist for sizes {sorted(FIXED_MAPS)}; "
                             f"pass random_map=True for size {size}")
        self.size = size
        self.random_map = random_map
        self.is_slippery = is_slippery
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=512)
        self.action_space = spaces.Text(max_length=64)
        self._lake: Any = None
        self._desc: list[str] = FIXED_MAPS.get(size, [])
        self._state = 0
        self._goal = 0
        self._start_distance = 1

    def _grid_text(self) -> str:
        row, col = divmod(self._state, self.size)
        lines = []
        for r, line in enumerate(self._desc):
            cells = ["P" if (r, c) == (row, col) else ("." if ch in "SF" else ch)
                     for c, ch in enumerate(line)]
            lines.append(" ".join(cells))
        return "\n".join(lines) + f"\nYou are P at row {row + 1} col {col + 1}. Move left, down, right or up?"

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.random_map:
            self._desc = generate_random_map(size=self.size, seed=seed)
        self._lake = gym.make("FrozenLake-v1", desc=self._desc, is_slippery=self.is_slippery)
        self._state, _ = self._lake.reset(seed=seed)
        self._goal = "".join(self._desc).index("G")  # once per map, not per step
        self._start_distance = max(1, self._goal_distance(self._state))
        return self._grid_text(), {"success": False, "progress": 0.0}

    def step(self, action: str):
        move = parse_move(action)
        if move is None:
            return self._grid_text(), 0.0, False, False, {"invalid_action": True, "success": False,
                                                          "progress": self.progress()}
        self._state, reward, terminated, truncated, _ = self._lake.step(move)
        success = bool(terminated and reward > 0)
        return (self._grid_text(), float(reward), bool(terminated), bool(truncated),
                {"success": success, "progress": self.progress()})

    def _goal_distance(self, state: int) -> int:
        row, col = divmod(state, self.size)
        goal_row, goal_col = divmod(self._goal, self.size)
        return abs(goal_row - row) + abs(goal_col - col)

    def progress(self) -> float:
        """Share of the start's distance to the goal covered so far; 0 in a hole."""
        row, col = divmod(self._state, self.size)
        if self._desc[row][col] == "H":
            return 0.0
        return 1.0 - self._goal_distance(self._state) / self._start_distance

    def render(self) -> str:
        return self._grid_text()
