"""What one episode leaves behind: the whole conversation as token ids.

`token_ids` is every token of the multi-turn conversation in order;
`loss_mask[i] == 1` exactly where the policy generated token i, and
`logprobs[i]` is that token's sampling logprob (0.0 elsewhere). Observations,
chat markers and closing tokens the framework adds have mask 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Turn:
    prompt_tokens: int  # context length when this turn's generation began
    generated_tokens: int
    weight_version: int
    finish_reason: str
    invalid_action: bool
    llm_s: float
    env_s: float


@dataclass
class Ticket:
    """One GRPO group to roll out: `group_size` episodes of one task and seed."""

    group_id: str
    task: str
    seed: int
    group_size: int
    issued_version: int
    keep: int = 0  # tail batching: the group is done after its first `keep` good episodes (0 = all)
    round_id: int = -1  # tail batching: the round the group belongs to
    # Prepared ahead (buffer.py): the group may reset its envs now, but generates only
    # once the buffer has taken this many steps (0 = at once).
    opens_at_step: int = 0
    # An evaluation episode (train/evaluation.py): sampled at this temperature, on whatever
    # weights serve it, never trained on; None for training.
    eval_temperature: float | None = None


def json_scalars(info: dict[str, Any]) -> dict[str, Any]:
    """The entries of an env's info dict that a reward function can receive as JSON.

    Reward functions may run in another process or a serverless function, so
    only str/int/float/bool values (numpy scalars converted) travel; the rest
    (arrays, objects) is left out rather than failing the episode.
    """
    out: dict[str, Any] = {}
    for k, v in (info or {}).items():
        if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:  # numpy / torch scalars
            v = v.item()
        if isinstance(v, bool | int | str) or (isinstance(v, float) and math.isfinite(v)):
            out[str(k)] = v
    return out


@dataclass
class Trajectory:
    traj_id: str
    group_id: str
    task: str
    seed: int
    start_version: int
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    env_return: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    num_invalid: int = 0
    max_turns: int = 0
    format_penalty: float = 0.0
    env_info: dict[str, Any] = field(default_factory=dict)  # the last step's info: JSON scalars only
    reward: float | None = None
    reward_info: dict[str, Any] = field(default_factory=dict)
    status: str = "running"  # running | ok | reward_failed | env_failed | engine_failed | stale | prompt_too_long | cancelled
    error: str = ""
    # A failure a re-roll would meet again: the user's env or reward code raised (not with a
    # network or time-out error), broke the env contract, or the prompt cannot fit; False for
    # ok and for what may pass (engines, connections, time-outs). See roll_agentic/failures.py.
    deterministic: bool = False
    restarts: int = 0
    llm_s: float = 0.0
    env_s: float = 0.0
    reward_s: float = 0.0
    wall_s: float = 0.0
    finished_at: float = 0.0

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def generated_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def min_version(self) -> int:
        return min([self.start_version] + [t.weight_version for t in self.turns])

    def summary(self) -> dict[str, Any]:
        """The JSON input of a reward function (rewards/*.py)."""
        return {
            "task": self.task, "seed": self.seed, "env_return": self.env_return,
            "success": self.success, "terminated": self.terminated, "truncated": self.truncated,
            "num_turns": self.num_turns, "max_turns": self.max_turns, "num_invalid": self.num_invalid,
            "format_penalty": self.format_penalty, "responses": list(self.responses),
            "info": dict(self.env_info),
        }

    def validate(self) -> None:
        """Raises ValueError if the record is not trainable (lengths, reward)."""
        n = len(self.token_ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(f"trajectory {self.traj_id}: token_ids/loss_mask/logprobs lengths differ "
                             f"({n}, {len(self.loss_mask)}, {len(self.logprobs)})")
        if self.reward is None or not math.isfinite(self.reward):
            raise ValueError(f"trajectory {self.traj_id}: reward {self.reward!r} is not a finite number")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
