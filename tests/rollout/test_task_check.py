"""A run's tasks are checked before anything starts: one line naming the task, not a failing run."""

from roll_agentic.config import TaskConfig
from roll_agentic.rollout.task_check import task_problem


def test_shipped_tasks_pass():
    tasks = [TaskConfig(name="frozenlake", env_id="envs.frozenlake:FrozenLakeText", reward="frozenlake"),
             TaskConfig(name="cliff", env_id="CliffWalking-v1")]
    assert task_problem(tasks) == ""


def test_a_typo_in_env_id_names_the_task_and_the_module():
    problem = task_problem([TaskConfig(name="fl", env_id="envs.frozenlak:FrozenLakeText", reward="frozenlake")])
    assert problem.startswith("tasks[0] (fl): env_id 'envs.frozenlak:FrozenLakeText': cannot import module")


def test_an_env_that_fails_to_build_is_reported_as_such():
    problem = task_problem([TaskConfig(name="fl", env_id="envs.frozenlake:FrozenLakeText", env_kwargs={"sise": 3})])
    assert problem.startswith("tasks[0] (fl): env_id 'envs.frozenlake:FrozenLakeText'") and "sise" in problem


def test_a_reward_module_that_does_not_exist_is_named():
    problem = task_problem([TaskConfig(name="g", env_id="CliffWalking-v1"),
                            TaskConfig(name="h", env_id="CliffWalking-v1", reward="frozen_lake")])
    assert problem.startswith("tasks[1] (h): reward 'frozen_lake' is not a module in rewards/")
