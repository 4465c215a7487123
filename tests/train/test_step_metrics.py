"""The rollout side of a step's metrics: the share of groups that teach GRPO nothing, per task."""

import pytest

from roll_agentic.rollout.trajectory import Trajectory
from roll_agentic.train.step_metrics import no_signal_share, rollout_metrics


def _group(task: str, gid: str, rewards: list[float]) -> list[Trajectory]:
    return [Trajectory(f"{gid}-{i}", gid, task, 0, 0, reward=r) for i, r in enumerate(rewards)]


def test_groups_of_equal_rewards_are_counted_per_task_and_overall():
    groups = [
        _group("lake", "a", [0.0, 0.0, 0.0]),  # every member failed alike: no signal
        _group("lake", "b", [0.0, 1.0, 0.0]),
        _group("guess", "c", [0.5, 0.5]),  # all alike, above 0: no signal either
        _group("guess", "d", [0.5, 0.5]),
    ]
    m = rollout_metrics(groups, version=1, engine_stats=[], last_engine_stats=[], worker_stats=[], step_s=1.0)
    assert m["reward/lake/no_signal_groups"] == pytest.approx(0.5)
    assert m["reward/guess/no_signal_groups"] == pytest.approx(1.0)
    assert m["reward/no_signal_groups"] == pytest.approx(0.75)
    assert (m["batch/lake/groups"], m["batch/guess/groups"]) == (2.0, 2.0)  # the step's task mix


def test_no_groups_no_signal_share():
    assert no_signal_share([]) == 0.0
