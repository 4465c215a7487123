"""`roll-agentic env new PACKAGE`: a working env and reward to start a task from.

It writes a package of three files, a multi-turn text env, the reward that
scores it (`<name>_reward.py`) and an `__init__.py`, that pass `roll-agentic env check` and
train as they are, and prints the two commands that do so. A user edits
them into their task instead of assembling an env from the gymnasium
docs, the summary keys from the README and the Lambda handler's shape.
"""

from __future__ import annotations

import importlib.util
import keyword
import sys
from pathlib import Path

ENV_CLASS = "Env"
# roll-agentic's own top-level packages (pyproject's packages.find): a package named like one
# shadows it, and in a clone's root the name is already a folder the user must not remove.
PROJECT_PACKAGES = ("roll_agentic", "envs", "rewards", "serverless")

# Raw: the regex in it keeps its backslashes.
ENV_SOURCE = r'''"""{name}: reach a target number by replying "up" or "down" (edit it into your task).

A text env for roll-agentic: `reset(seed)` returns (observation, info) and
`step(reply)` takes the policy's reply as text. Each observation is the
whole state in words, so the policy needs only the last message.
- A reply that parses into no move is not an error: the env stays put and
  says so with `info["invalid_action"] = True`; the run counts it against
  the task's `format_penalty`.
- `info` is passed to the reward function (its JSON scalars): put what the
  reward should credit there (here: `moves`, the distance left).
- The run ends an episode at the task's `max_turns`; `terminated` here
  means the target was reached.
Check it with `roll-agentic env check {name}.env:{cls}`.
"""

from __future__ import annotations

import re
from typing import ClassVar

import gymnasium as gym
from gymnasium import spaces

_MOVE = re.compile(r"\b(up|down)\b", re.IGNORECASE)


class {cls}(gym.Env):
    metadata: ClassVar[dict] = {{"render_modes": ["ansi"]}}

    def __init__(self, size: int = 5, render_mode: str | None = "ansi"):
        if size < 1:
            raise ValueError(f"{name}: size must be at least 1, got {{size}}")
        self.size = size
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=256)
        self.action_space = spaces.Text(max_length=64)
        self._at = self._target = self._moves = 0
        self._last = ""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # seeds self.np_random: the same seed, the same episode
        self._target = int(self.np_random.integers(1, self.size + 1))
        self._at, self._moves = 0, 0
        self._last = self._describe()
        return self._last, self._info(False)

    def step(self, action: str):
        found = _MOVE.search(action)  # the first "up" or "down" as a word, any case
        move = found.group(1).lower() if found else None
        if move is None:
            self._last = f"Reply up or down. {{self._describe()}}"
            return self._last, 0.0, False, False, self._info(False, invalid_action=True)
        self._moves += 1
        self._at += 1 if move == "up" else -1
        if self._at == self._target:
            self._last = f"You reached {{self._target}}."
            return self._last, 1.0, True, False, self._info(True)
        self._last = self._describe()
        return self._last, 0.0, False, False, self._info(False)

    def _describe(self) -> str:
        return f"You are at {{self._at}}. Reach {{self._target}} by replying up or down."

    def _info(self, success: bool, **extra) -> dict:
        return {{"success": success, "moves": self._moves, "distance": abs(self._target - self._at), **extra}}

    def render(self) -> str:
        return self._last
'''

REWARD_SOURCE = '''"""{name}'s reward: reaching the target, with credit for getting closer.

`reward(summary)` gets the episode's summary: success, env_return,
num_turns, num_invalid, format_penalty, responses and info (the env's
last info dict). The same file runs in the training process
(reward.mode=local), in the local Lambda emulator and on AWS Lambda, where
it is deployed as one file: import only the standard library.
"""

import json


def reward(summary: dict) -> float:
    turns = max(1, int(summary["num_turns"]))
    penalty = float(summary.get("format_penalty", 0.1)) * int(summary["num_invalid"]) / turns
    info = summary.get("info") or {{}}
    closer = 1.0 / (1.0 + float(info.get("distance", 0)))  # partial credit: a gradient before any success
    return (1.0 if summary["success"] else 0.5 * closer) - penalty


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {{"reward": reward(summary)}}
'''


class ScaffoldError(ValueError):
    """A package name or folder `env new` cannot use; the message says why."""


def reward_module(name: str) -> str:
    """The reward's file stem: named after the package, since a reward is deployed as the
    function `<prefix><file stem>`, two scaffolded tasks with one `reward.py` each would clash."""
    return f"{name}_reward"


def check_reserved(name: str) -> None:
    """Refuses what can never be a new package's name: not an identifier, a keyword, a
    standard-library module or one of roll-agentic's own packages."""
    if keyword.iskeyword(name):
        raise ScaffoldError(f"{name!r} is a Python keyword, so no package can be named that "
                            f"(`import {name}` is a syntax error): choose another name, e.g. my_{name}")
    if not name.isidentifier():
        raise ScaffoldError(f"{name!r} cannot be a Python package name: use letters, digits and _ "
                            "(not starting with a digit), e.g. my_task")
    if name in PROJECT_PACKAGES:
        raise ScaffoldError(f"{name!r} is one of roll-agentic's own packages ({', '.join(PROJECT_PACKAGES)}): "
                            "a package of yours with that name would shadow it; choose another name, e.g. my_task")
    if name in sys.stdlib_module_names:
        raise ScaffoldError(f"{name!r} is a module of Python's standard library: a package of yours with that "
                            "name would shadow it; choose another name, e.g. my_task")


def check_name(name: str) -> None:
    check_reserved(name)
    try:
        taken = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        taken = False
    if taken:
        raise ScaffoldError(f"{name!r} is already an importable module here (it would shadow it, or it "
                            "shadows yours): choose another name")


def scaffold(name: str, folder: Path) -> list[Path]:
    """Writes `folder/name/{__init__,env,<name>_reward}.py`; refuses to overwrite anything."""
    # First, before the name is used as a path: `env new envs` in a clone's root said "not
    # overwriting envs/__init__.py: remove them", inviting the user to delete a shipped package.
    check_reserved(name)
    pkg = Path(folder) / name
    reward_file = f"{reward_module(name)}.py"
    files = {
        pkg / "__init__.py": f'"""{name}: a roll-agentic task (env.py) and its reward ({reward_file})."""\n',
        pkg / "env.py": ENV_SOURCE.format(name=name, cls=ENV_CLASS),
        pkg / reward_file: REWARD_SOURCE.format(name=name),
    }
    there = [str(p) for p in files if p.exists()]
    if there:
        raise ScaffoldError(f"not overwriting {', '.join(there)}: remove them or choose another name")
    check_name(name)  # after the existence check: a package written before is importable by now
    try:
        pkg.mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            path.write_text(text)
    except OSError as err:
        raise ScaffoldError(f"cannot write {pkg}: {err}") from None
    return list(files)


def next_steps(name: str) -> list[str]:
    """The commands that check and train the scaffolded task, run from the package's folder."""
    return [
        f"roll-agentic env check {name}.env:{ENV_CLASS}",
        f"roll-agentic train 'tasks=[{{name:{name},env_id:{name}.env:{ENV_CLASS},reward:{name}.{reward_module(name)},"
        f"max_turns:6,format_penalty:0.2}}]' trainer.total_steps=2",
    ]
