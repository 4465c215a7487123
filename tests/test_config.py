import subprocess
import sys

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.hydra_config import load_config


def test_defaults_compose_and_validate():
    cfg = load_config([])
    assert [t.name for t in cfg.tasks] == ["frozenlake", "guess"]
    assert cfg.algo.alpha == 1


def test_the_failing_window_is_a_rollout_key():
    assert load_config([]).rollout.max_failing_s == 300.0
    assert load_config(["rollout.max_failing_s=60"]).rollout.max_failing_s == 60.0


def test_list_of_tasks_from_the_command_line_takes_defaults():
    cfg = load_config(["tasks=[{name:cliff,env_id:CliffWalking-v1}]", "trainer.total_steps=2"])
    assert cfg.tasks[0].env_id == "CliffWalking-v1"
    assert cfg.tasks[0].max_turns == 8 and cfg.tasks[0].group_size == 8
    assert cfg.trainer.total_steps == 2


@pytest.mark.parametrize("override, message", [
    ("trainer.total_stepz=2", "unknown config key 'trainer.total_stepz' (did you mean 'total_steps'?); valid keys here: total_steps"),
    ("trainer.total_steps=banana", "config key 'trainer.total_steps': Value 'banana'"),
    ("algo.alpha=-1", "algo.alpha: expected an integer >= 0"),
    ("engine=foo", "config group engine has no option 'foo'"),
    ("engine.backend=tpu", "engine.backend: expected one of auto, vllm, hf"),
    ("tasks=[{name:c,envid:X}]", "unknown config key"),
    ("tasks=[{name:a/b,env_id:CliffWalking-v1}]", "tasks.0.name: expected letters, digits, _, - and . only"),
    ("rollout.mode=tail_batching", "algo.alpha: expected 0 with rollout.mode=tail_batching"),
    ("trainer.device=gpu", "trainer.device: expected cpu, cuda or cuda:N"),
    # accepted before, then a hang (max_batch=0), a torch error (a turn's budget filling the
    # context), every env call failing, or a run directory outside output_dir
    ("engine.max_batch=0", "engine.max_batch: expected an integer >= 1"),
    ("tasks.0.max_new_tokens=2000", "tasks.0.max_new_tokens: expected at most half of engine.max_model_len"),
    # the dotted form an override takes: the bracket form was refused when copied back
    ("tasks.0.max_turn=3", "unknown config key 'tasks.0.max_turn' (did you mean 'max_turns'?)"),
    ("rollout.env_step_timeout_s=-5", "rollout.env_step_timeout_s: expected a number of seconds > 0"),
    ("rollout.max_failing_s=0", "rollout.max_failing_s: expected a number of seconds > 0"),
    ("run_name=../../x", "run_name: expected a plain directory name"),
    ("engine.gpu_memory_utilization=2", "engine.gpu_memory_utilization: expected a number in (0, 1]"),
    ("model.dtype=bfloat16", "unknown config key 'model.dtype'"),
    ("rollout.mode=tail_batching algo.alpha=0 trainer.ppo_epochs=3", "trainer.ppo_epochs: expected 1 with"),
    ("algo.clip_eps_high=0.1", "algo.clip_eps_high: expected 0 (off) or a number in [algo.clip_eps = 0.2, 1)"),
    ("algo.dual_clip=0.5", "algo.dual_clip: expected 0 (off) or a number > 1"),
    ("rollout.mode=tail_batching algo.alpha=0 rollout.drop_no_signal_groups=true",
     "rollout.drop_no_signal_groups: expected false with rollout.mode=tail_batching"),
    ("algo.advantage=ppo", "algo.advantage: expected one of grpo, grpo_no_std, rloo"),
    ("algo.loss_agg=seq_mean", "algo.loss_agg: expected one of token_mean, seq_mean_token_mean"),
    # accepted, then boto3's ValidationException as a traceback once Ray and the emulator were up
    ("reward=serverless reward.function_prefix=team:", "reward.function_prefix: expected letters, digits, - and _"),
    (f"reward=serverless reward.function_prefix={'x' * 60}", "at most 52 of them (with 'guess_number' after it"),
    # a warm-up scaled the decayed rate: as long as the run, it never reached a third of trainer.lr
    ("trainer.lr_warmup_steps=80", "trainer.lr_warmup_steps: expected an integer >= 0 and fewer than "
     "trainer.total_steps (80), got 80"),
])
def test_bad_config_is_one_clear_line(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(override.split())
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_exits_nonzero_without_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "roll_agentic.cli", "train", "trainer.total_stepz=2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("config error: unknown config key 'trainer.total_stepz'")


TWO_REWARD_PY = ("tasks=[{name:a,env_id:CliffWalking-v1,reward:pkg_a.reward},"
                 "{name:b,env_id:CliffWalking-v1,reward:pkg_b.reward}]")


def test_rewards_sharing_a_file_name_are_refused_only_when_deployed():
    """With reward=local nothing is deployed: two `reward.py` modules were refused all the same."""
    with pytest.raises(ConfigError) as err:
        load_config([TWO_REWARD_PY, "reward=serverless"])
    assert str(err.value) == ("tasks: rewards 'pkg_a.reward' and 'pkg_b.reward' would both be deployed as "
                              "roll-agentic-reward; rename one module's file")
    cfg = load_config([TWO_REWARD_PY, "reward=local"])
    assert [t.reward for t in cfg.tasks] == ["pkg_a.reward", "pkg_b.reward"]


def test_a_task_name_with_a_space_is_refused():
    """It names metrics and TensorBoard tags: `reward/my task/mean`."""
    with pytest.raises(ConfigError, match=r"tasks\.0\.name: expected letters, digits, _, - and \. only .* got 'my task'"):
        load_config(["tasks=[{name:my task,env_id:CliffWalking-v1}]"])
