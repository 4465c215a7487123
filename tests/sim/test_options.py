"""RollMux's options beyond the paper, from the command line to the policy and the JSON."""

import argparse
import json

import pytest

from roll_agentic.mux.profile import ClusterSpec
from roll_agentic.sim import cli
from roll_agentic.sim.options import DEFAULT_OPTIONS, RollMuxOptions


def test_scale_train_reaches_the_policy_and_the_flags():
    args = argparse.Namespace(rehome=True, share_any=False, bank_slack=False, scale_train=2)
    options = RollMuxOptions.from_args(args)
    assert options.policy(ClusterSpec()).scale_train == 2
    assert RollMuxOptions.flags(options.as_doc()) == ["--rehome", "--scale-train 2"]
    assert DEFAULT_OPTIONS.policy(ClusterSpec()).scale_train == 0


def test_cli_scale_train_flag(capsys):
    cli.main(["compare", "--jobs", "12", "--seed", "1", "--scale-train", "1", "--rehome", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    doc = json.loads(out[-1])
    assert doc["rollmux_options"]["scale_train"] == 1
    assert doc["slo_attainment"]["rollmux"] == 1.0
    with pytest.raises(SystemExit):
        cli.main(["compare", "--scale-train", "-1"])
    assert "--scale-train" in capsys.readouterr().err
