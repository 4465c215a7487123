import math

import pytest

from roll_agentic.config import Config, ConfigError
from roll_agentic.config_check import validate
from roll_agentic.train.lr_schedule import lr_at


def test_constant_is_the_base_rate_at_every_step():
    assert [lr_at(s, 1e-2, 80) for s in (0, 40, 79)] == [1e-2, 1e-2, 1e-2]


def test_cosine_starts_at_the_base_rate_and_ends_at_the_floor():
    assert lr_at(0, 1.0, 81, "cosine", min_ratio=0.1) == pytest.approx(1.0)
    assert lr_at(40, 1.0, 81, "cosine", min_ratio=0.1) == pytest.approx(0.55)  # halfway: cos = 0
    assert lr_at(80, 1.0, 81, "cosine", min_ratio=0.1) == pytest.approx(0.1)
    rates = [lr_at(s, 1.0, 81, "cosine", min_ratio=0.1) for s in range(81)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))  # never rises


def test_linear_decays_in_equal_steps():
    rates = [lr_at(s, 1.0, 5, "linear", min_ratio=0.0) for s in range(5)]
    assert rates == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


def test_warmup_ramps_the_first_steps():
    assert [lr_at(s, 1.0, 100, "constant", warmup_steps=4) for s in range(5)] == pytest.approx(
        [0.25, 0.5, 0.75, 1.0, 1.0])
    assert lr_at(1, 1.0, 101, "cosine", warmup_steps=4) == pytest.approx(0.5)


def test_the_warmup_reaches_the_full_rate_and_the_decay_runs_over_the_steps_after_it():
    """The warm-up scaled the decayed rate: 80 warm-up steps of 80 peaked at 28 % of lr."""
    rates = [lr_at(s, 1.0, 24, "cosine", min_ratio=0.1, warmup_steps=4) for s in range(24)]
    assert max(rates) == pytest.approx(1.0) and rates[3] == pytest.approx(1.0)
    assert rates[4] == pytest.approx(1.0) and rates[-1] == pytest.approx(0.1)
    assert rates[14] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * 10 / 19)) / 2)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:], strict=False))  # decays, after the ramp


def test_a_warmup_as_long_as_the_run_is_refused():
    cfg = Config()
    cfg.trainer.lr_warmup_steps = cfg.trainer.total_steps
    with pytest.raises(ConfigError, match="trainer.lr_warmup_steps: .*fewer than trainer.total_steps"):
        validate(cfg)


def test_an_unknown_schedule_is_refused_by_the_config_check():
    cfg = Config()
    cfg.trainer.lr_schedule = "exponential"
    with pytest.raises(ConfigError, match="trainer.lr_schedule"):
        validate(cfg)
