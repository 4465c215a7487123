"""Overrides a newcomer gets wrong: each ends in one line naming the key and the fix."""

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.hydra_config import load_config

CLIFF = "tasks=[{name:cliff,env_id:CliffWalking-v1%s}]"


@pytest.mark.parametrize("overrides, message", [
    # inf passed every "> 0" check: an lr of inf trains to nan weights, a timeout of inf
    # overflows the socket timeout of every reward call
    (["trainer.lr=inf"], "trainer.lr: expected a finite number, got inf"),
    (["reward.timeout_s=inf"], "reward.timeout_s: expected a finite number, got inf"),
    (["engine.temperature=inf"], "engine.temperature: expected a finite number, got inf"),
    ([CLIFF % ",weight:inf"], "tasks[0].weight: expected a finite number, got inf"),
    # a template the worker cannot fill failed every episode (KeyError, IndexError, ValueError)
    ([CLIFF % ",prompt_template:'Grid: {obs}'"], "tasks[0].prompt_template: expected text with {observation}"),
    ([CLIFF % ",prompt_template:'Grid: {observation'"], "tasks[0].prompt_template: expected text with"),
    ([CLIFF % ",prompt_template:'Grid: {0}'"], "tasks[0].prompt_template: expected text with"),
    # ... and one without {observation} hid the env's state from the policy
    ([CLIFF % ",prompt_template:'Walk to the goal.'"], "tasks[0].prompt_template: expected text with"),
    # hydra's grammar error and "Error merging override" said neither what nor how
    (["tasks[0].group_size=4"], "a list entry is key.N (tasks.0.group_size=4)"),
    (["tasks={name:cliff,env_id:CliffWalking-v1}"], "a list [...] where a mapping {...} belongs, or the reverse"),
    ([CLIFF % ",env_kwargs:[5]"], "env_kwargs a mapping, e.g. env_kwargs:{size:5}"),
    # the shaped rewards take format_penalty as a share: it stays in [0, 1] for them
    (["tasks.0.format_penalty=2"], "tasks[0].format_penalty: expected a number in [0, 1]"),
])
def test_bad_overrides_end_in_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_template_with_the_observation_and_literal_braces_is_accepted():
    cfg = load_config([CLIFF % ",prompt_template:'Reply as {{\"move\": ...}}. Grid: {observation}'"])
    assert cfg.tasks[0].prompt_template.format(observation="G") == 'Reply as {"move": ...}. Grid: G'


def test_env_return_takes_a_format_penalty_in_the_envs_own_units():
    # CliffWalking charges -1 a move; an unparseable reply is not stepped, so at a penalty
    # of at most 1 (the old upper bound) garbage scored at least as well as every move.
    cfg = load_config([CLIFF % ",format_penalty:2.0"])
    assert cfg.tasks[0].reward == "env_return" and cfg.tasks[0].format_penalty == 2.0
