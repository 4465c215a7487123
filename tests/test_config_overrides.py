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
    ([CLIFF % ",weight:inf"], "tasks.0.weight: expected a finite number, got inf"),
    # a template the worker cannot fill failed every episode (KeyError, IndexError, ValueError)
    ([CLIFF % ",prompt_template:'Grid: {obs}'"], "tasks.0.prompt_template: expected text with {observation}"),
    ([CLIFF % ",prompt_template:'Grid: {observation'"], "tasks.0.prompt_template: expected text with"),
    ([CLIFF % ",prompt_template:'Grid: {0}'"], "tasks.0.prompt_template: expected text with"),
    # ... and one without {observation} hid the env's state from the policy
    ([CLIFF % ",prompt_template:'Walk to the goal.'"], "tasks.0.prompt_template: expected text with"),
    # hydra's grammar error and "Error merging override" said neither what nor how
    (["tasks[0].group_size=4"], "a list entry is key.N (tasks.0.group_size=4)"),
    (["tasks={name:cliff,env_id:CliffWalking-v1}"], "a list [...] where a mapping {...} belongs, or the reverse"),
    ([CLIFF % ",env_kwargs:[5]"], "env_kwargs a mapping, e.g. env_kwargs:{size:5}"),
    # the shaped rewards take format_penalty as a share: it stays in [0, 1] for them
    (["tasks.0.format_penalty=2"], "tasks.0.format_penalty: expected a number in [0, 1]"),
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


def test_the_free_form_mappings_take_the_users_own_keys():
    # `envs.resources={node_a:1}` (README: env and trainer workers are placed "the same way" as
    # pools, with envs.resources and trainer.resources) was refused as "unknown config key
    # 'envs.resources.node_a'", as was every class of router.hardware
    cfg = load_config(["envs.resources={node_a:1}", "trainer.resources.node_b=2",
                       "router.hardware={H20:{prefill_tokens_per_s:9000}}"])
    assert cfg.envs.resources == {"node_a": 1.0} and cfg.trainer.resources == {"node_b": 2.0}
    assert cfg.router.hardware["H20"].prefill_tokens_per_s == 9000.0
    assert cfg.router.hardware["H20"].decode_tokens_per_s == 500.0  # the class's defaults fill the rest
    # ... while their values keep their types, and a typo in a schema's own key is still refused
    with pytest.raises(ConfigError, match=r"config key 'envs.resources.node_a': Value 'many'"):
        load_config(["envs.resources={node_a:many}"])
    with pytest.raises(ConfigError, match=r"unknown config key 'router.hardware.H20.prefill_tokens'"):
        load_config(["router.hardware={H20:{prefill_tokens:9000}}"])
    with pytest.raises(ConfigError, match=r"unknown config key 'envs.resourcez'"):
        load_config(["envs.resourcez={node_a:1}"])


@pytest.mark.parametrize("overrides, message", [
    # passed validation; the router's actor then failed to build after the engines had
    # started, and every episode failed on the dead router
    (["router.policy=phase_aware", "router.hardware={H20:{prefill_tokens_per_s:0}}"],
     "router.hardware.H20.prefill_tokens_per_s: expected a number > 0, got 0.0"),
    (["router.hardware={H20:{decode_tokens_per_s:-5}}"], "router.hardware.H20.decode_tokens_per_s: expected a number > 0"),
    (["router.hardware={H20:{price_per_hour:-1}}"], "router.hardware.H20.price_per_hour: expected a number >= 0"),
    # a pool phase_aware cannot cost: every request took its task's own pool, as under affinity
    (["router.policy=phase_aware", "router.hardware={H20:{prefill_tokens_per_s:4000}}",
      "pools=[{name:default,hardware:h20},{name:prefill,hardware:H20}]"],
     "pools[default].hardware: expected a class router.policy=phase_aware can cost, one of router.hardware's ['H20']"),
    (["router.policy=phase_aware"], "pools[default].hardware: expected a class router.policy=phase_aware can cost"),
    # two pools of one name were silently merged into one by the router
    (["pools=[{name:default,hardware:H20},{name:default,hardware:H800}]"],
     "pools.1.name: expected a name no other pool has, got 'default'"),
])
def test_bad_router_classes_and_pool_names_are_refused_before_the_start(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override, message", [
    # Hydra's own advice for a key it does not know is `+key=...`: that added the key, and
    # the run went on ignoring it (80 steps for +trainer.total_stepz=5)
    ("+trainer.total_stepz=5", "unknown config key 'trainer.total_stepz' (did you mean 'total_steps'?); valid keys here: total_steps, lr,"),
    ("++trainer.total_stepz=5", "unknown config key 'trainer.total_stepz' (did you mean 'total_steps'?); valid keys here: total_steps, lr,"),
    ("+tasks.0.group_sise=4", "unknown config key 'tasks.0.group_sise' (did you mean 'group_size'?); valid keys here: name, env_id,"),
    ("+seed=3", "unknown config key 'seed'; valid keys here: run_name, output_dir, tasks,"),
])
def test_a_key_added_with_plus_must_still_be_a_key_of_the_schema(override, message):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override, key, plain", [
    ("+trainer.lr=1e-5", "trainer.lr", "trainer.lr=1e-5"),
    ("+tasks.0.group_size=4", "tasks.0.group_size", "tasks.0.group_size=4"),
    ("+run_name=my_run", "run_name", "run_name=my_run"),
])
def test_plus_on_a_key_that_exists_says_to_set_it(override, key, plain):
    # was Hydra's first line only, "Could not append to config. An item is already at
    # 'trainer.lr'.": its hint (key=value, or ++key=value) was dropped with the other lines
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value) == (f"override '{override}': {key} already exists; set it with {plain} "
                              f"(or ++{plain} to set-or-add)")
    assert load_config([f"++{plain}"]) == load_config([plain])  # the two ways it names both work


def test_plus_still_adds_to_the_free_form_mappings():
    cfg = load_config(["+envs.resources.node_a=1", "+tasks.0.env_kwargs.holes=2", "++trainer.total_steps=5"])
    assert cfg.envs.resources == {"node_a": 1.0} and cfg.tasks[0].env_kwargs["holes"] == 2
    assert cfg.trainer.total_steps == 5


@pytest.mark.parametrize("override", ["tasks.2.group_size=4", "tasks.2={name:x,env_id:CliffWalking-v1}",
                                      "+tasks.2.group_size=4"])
def test_a_list_entry_that_does_not_exist_is_named_as_such(override):
    # was: "Invalid type assigned: dict is not a subclass of TaskConfig. value: {}", or
    # "Error merging override ...": neither said the default list has two tasks
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value) == ("config key 'tasks.2': tasks has no entry 2 (entries are numbered from 0); to add "
                              "one, give the whole list, e.g. tasks=[{...},{...}]")


def test_a_mistyped_key_inside_a_task_list_names_where_it_is_and_the_key_meant():
    with pytest.raises(ConfigError) as err:
        load_config([CLIFF % ",max_turn:5"])
    assert str(err.value).startswith("unknown config key 'max_turn' in a task entry (did you mean 'max_turns'?); "
                                     "valid keys here: name, env_id,")


@pytest.mark.parametrize("override, quoted", [
    # Hydra's grammar refused these, and only its first line was kept: "no viable alternative
    # at input '[1,2'" or "mismatched input '{' expecting <EOF>", naming neither override nor fix
    ("x=[1,2", """'x="[1,2"'"""),
    ("run_name=a(b", """'run_name="a(b"'"""),
    ("run_name=a#b", """'run_name="a#b"'"""),
    ("tasks.0.prompt_template=Say: {observation}", """'tasks.0.prompt_template="Say: {observation}"'"""),
])
def test_an_override_hydra_cannot_parse_is_named_with_its_value_quoted(override, quoted):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    msg = str(err.value)
    assert f"cannot parse override {override!r}" in msg and f"in the shell {quoted}" in msg
    assert "\n" not in msg


def test_the_quoted_value_the_message_suggests_loads():
    cfg = load_config(['tasks.0.prompt_template="Say: {observation}"'])
    assert cfg.tasks[0].prompt_template == "Say: {observation}"


@pytest.mark.parametrize("override, one", [("trainer.lr=1e-5,2e-5", "trainer.lr=1e-5"),
                                           ("trainer.lr=choice(1e-5,2e-5)", "trainer.lr=VALUE")])
def test_a_sweep_names_the_override_and_keeps_hydras_hints(override, one):
    # was "Ambiguous value for argument '...'" alone: Hydra's hints (a list, quotes, --multirun) dropped
    with pytest.raises(ConfigError) as err:
        load_config([override])
    msg = str(err.value)
    assert msg.startswith(f"override {override!r} gives several values, a sweep, which roll-agentic train does not run")
    assert f"one value per run ({one})" in msg and "quote the value, in the shell 'trainer.lr=" in msg
    assert "trainer.lr=[a,b]" in msg and "\n" not in msg


def test_a_word_the_shell_split_off_a_value_says_to_quote_it():
    # `roll-agentic train run_name=a b` reaches Hydra as two overrides, the second without '='
    with pytest.raises(ConfigError) as err:
        load_config(["run_name=a", "b"])
    assert str(err.value) == ("cannot parse override 'b' (no '='): write key=value, e.g. trainer.total_steps=5; a value "
                              """with spaces must be quoted, or the shell splits it into words: 'key="value with spaces"'""")


@pytest.mark.parametrize("override, instead", [
    # compose() reads no hydra.* setting: these were accepted and did nothing
    ("hydra.run.dir=x", "the run's directory is <output_dir>/<run_name>: set output_dir=DIR (and run_name=NAME) instead"),
    ("++hydra.job.chdir=true", "set output_dir=DIR"),
    ("hydra.verbose=true", "set the run's own keys instead"),
    ("hydra/job_logging=disabled", "set the run's own keys instead"),
])
def test_hydras_own_settings_are_refused_up_front(override, instead):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    msg = str(err.value)
    assert msg.startswith(f"override {override!r}: Hydra's own settings (hydra.*, hydra/...) are not supported by "
                          "roll-agentic train") and instead in msg


@pytest.mark.parametrize("override, name", [("~trainer", "trainer"), ("~tasks", "tasks"), ("~trainer.lr", "trainer.lr"),
                                            ("~trainer.lr=0.005", "trainer.lr")])
def test_deleting_a_key_is_refused_up_front(override, name):
    # `~trainer` and `~tasks` were accepted and the defaults filled back in; `~trainer.lr` said
    # only "Error merging override ~trainer.lr"
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert str(err.value) == (f"override {override!r}: deleting a key (~{name}) is not supported by roll-agentic "
                              f"train, as every key has a value in the schema: set {name} to its default value "
                              "(roll_agentic/config.py) or remove it from your config file")


def test_the_cli_refuses_hydra_run_dir_before_any_work(capsys):
    from roll_agentic.cli import main

    assert main(["train", "hydra.run.dir=elsewhere"]) == 2
    assert "set output_dir=DIR" in capsys.readouterr().err


@pytest.mark.parametrize("override", ["trainer.total_steps=\n", "tasks=[\n", "trainer.total_steps=1,\n2"])
def test_a_control_character_in_a_value_is_named_on_one_line(override):
    # Quoting the value kept the newline: the suggested fix spread the one-line error over two.
    with pytest.raises(ConfigError) as err:
        load_config([override])
    assert "\n" not in str(err.value) and "control character" in str(err.value)
