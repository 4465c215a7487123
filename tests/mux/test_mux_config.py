"""The mux yaml's settings are range-checked where the file is read, every problem at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from roll_agentic.config import ConfigError
from roll_agentic.mux.mux_config import MuxConfig, load_mux_config, range_problems

REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_mux_file_still_loads():
    """conf/mux/one_job.yaml is a job for `mux submit`, not a mux file: the others are."""
    paths = [p for p in sorted((REPO / "conf" / "mux").glob("*.yaml")) if p.name != "one_job.yaml"]
    assert paths
    for path in paths:
        assert load_mux_config(path).jobs, path


def test_the_edges_of_every_range_load(tmp_path):
    """What the test fixtures and conf/mux use: zero switch cost and headroom, margin 1, no pinning."""
    p = tmp_path / "m.yaml"
    p.write_text("backend: auto\nwarm_switch_s: 0.0\nslo_headroom: 0.0\nprofile_margin: 1.0\nmax_rollbacks: 0\n"
                 "ray_num_cpus: 0\nrollout_price_per_hour: 0\nprofile_steps: 1\nmax_model_len: 64\n"
                 "rollout_cpus: []\ntrain_cpus: [1, 0]\n")
    m = load_mux_config(p)
    assert (m.backend, m.warm_switch_s, m.train_cpus, m.rollout_price_per_hour) == ("auto", 0.0, [1, 0], 0.0)
    assert range_problems(MuxConfig()) == []  # the defaults are valid


@pytest.mark.parametrize(("line", "message"), [
    ("backend: tpu", "backend: expected one of auto, vllm, hf, got 'tpu'"),
    ("backend: vLLM", "backend: expected one of auto, vllm, hf, got 'vLLM'"),
    ("phase_timeout_s: -1", "phase_timeout_s: expected a number of seconds > 0, got -1"),
    ("phase_timeout_s: .inf", "phase_timeout_s: expected a finite number, got inf"),
    ("max_batch: 0", "max_batch: expected an integer >= 1, got 0"),
    ("max_model_len: 8", "max_model_len: expected an integer >= 64, got 8"),
    ("ray_num_cpus: -3", "ray_num_cpus: expected an integer >= 0 (0 = 16 logical slots), got -3"),
    ("rollout_price_per_hour: .nan", "rollout_price_per_hour: expected a finite number, got nan"),
    ("train_price_per_hour: -2", "train_price_per_hour: expected a number >= 0, got -2"),
    ("warm_switch_s: -0.1", "warm_switch_s: expected a number of seconds >= 0, got -0.1"),
    ("slo_headroom: -0.5", "slo_headroom: expected a number >= 0, got -0.5"),
    ("profile_steps: 0", "profile_steps: expected an integer >= 1, got 0"),
    ("profile_margin: 0.5", "profile_margin: expected a number >= 1.0 (worst case), got 0.5"),
    ("rollout_cpus: [-1]", "rollout_cpus: expected a list of distinct core numbers >= 0 (empty: not pinned), got [-1]"),
    ("rollout_cpus: [0, 0]", "rollout_cpus: expected a list of distinct core numbers >= 0"),
    ("train_cpus: [true]", "train_cpus: expected a list of distinct core numbers >= 0"),
    ("train_cpus: ['0']", "train_cpus: expected a list of distinct core numbers >= 0"),
    # nan passed the SLO's ">= 1.0" (nan < 1.0 is False); an infinite one tolerates any slowdown.
    ("jobs: [{name: a, slo: .nan}]", "jobs[0].slo: expected a finite slowdown factor >= 1.0, got nan"),
    ("jobs: [{name: a, slo: .inf}]", "jobs[0].slo: expected a finite slowdown factor >= 1.0, got inf"),
    ("jobs: [{name: a, slo: 0.5}]", "jobs[0].slo: expected a finite slowdown factor >= 1.0, got 0.5"),
])
def test_an_out_of_range_setting_is_refused_naming_key_and_value(tmp_path, line, message):
    p = tmp_path / "m.yaml"
    p.write_text(line + "\n")
    with pytest.raises(ConfigError) as err:
        load_mux_config(p)
    assert str(err.value).startswith(f"{p}: {message}") and "\n" not in str(err.value)


def test_a_core_beyond_this_machine_is_not_refused(tmp_path):
    """The file is read where the pools may not run (`mux status --config`); the pinning leaves such a core out."""
    p = tmp_path / "m.yaml"
    p.write_text("rollout_cpus: [99999]\n")
    assert load_mux_config(p).rollout_cpus == [99999]


def test_every_problem_is_listed_at_once(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("backend: tpu\nmax_batch: 0\nphase_timeout_s: -1\n")
    with pytest.raises(ConfigError) as err:
        load_mux_config(p)
    text = str(err.value)
    assert text.startswith(f"{p}: backend: expected one of auto, vllm, hf, got 'tpu' (and 2 more: ")
    assert "max_batch: expected an integer >= 1, got 0" in text and "phase_timeout_s:" in text
