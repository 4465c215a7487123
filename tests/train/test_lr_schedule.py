import math

import pytest

from roll_agentic.config import Config, ConfigError, validate
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
    assert lr_at(1, 1.0, 101, "cosine", warmup_steps=4) == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 0.01)) / 2)


def test_an_unknown_schedule_is_refused_by_the_config_check():
    cfg = Config()
    cfg.trainer.lr_schedule = "exponential"
    with pytest.raises(ConfigError, match="trainer.lr_schedule"):
        validate(cfg)
