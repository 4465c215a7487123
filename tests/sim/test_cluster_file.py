import json
from pathlib import Path

import pytest

from roll_agentic.mux.profile import ClusterSpec
from roll_agentic.sim import cli
from roll_agentic.sim.cluster_file import load_cluster

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "conf" / "sim" / "cluster_h20_h800.yaml"


def _yaml(tmp_path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_the_shipped_file_is_the_default_cluster_written_out():
    base = ClusterSpec(migration=True, rollout_fifo=True)
    spec = load_cluster(DEFAULT_FILE, base)
    assert spec.rollout == base.rollout and spec.train == base.train
    assert spec.cold_switch_s == base.cold_switch_s and spec.scale_efficiency == base.scale_efficiency
    assert spec.warm_switch_s == pytest.approx(base.warm_switch_s, abs=1e-3)
    assert spec.migration and spec.rollout_fifo  # the flags' switches are kept


def test_keys_left_out_keep_the_defaults(tmp_path):
    spec = load_cluster(_yaml(tmp_path, "train: {name: H100, price_per_gpu_hour: 2.5}\ncold_switch_s: 90\n"))
    assert spec.train.name == "H100" and spec.train.price_per_gpu_hour == 2.5
    assert spec.train.gpus_per_node == 8 and spec.train.host_mem_gb == 1024
    assert spec.rollout == ClusterSpec().rollout and spec.cold_switch_s == 90.0
    assert load_cluster(_yaml(tmp_path, "{}")) == ClusterSpec()  # an empty mapping, on purpose: every default


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rollout: {colour: red}", "rollout.colour: unknown key; valid: name, gpus_per_node"),
        ("train: {gpus_per_node: 2.5}", "train.gpus_per_node must be a whole number of GPUs >= 1, got 2.5"),
        ("train: {price_per_gpu_hour: 0}", "price per GPU-hour, > 0, got 0"),
        ("rollout: {host_mem_gb: yes}", "host_mem_gb must be GB of host memory per node, > 0, got True"),
        ("rollout: {name: ''}", "rollout.name must be a name"),
        ("rollout: 8", "rollout must be a mapping"),
        ("migration: false", "migration: a policy switch, not hardware; use its command-line flag"),
        ("nodes: 3", "nodes: unknown key; valid: rollout, train, warm_switch_s"),
        ("scale_efficiency: 1.5", "scale_efficiency must be a fraction in (0, 1], got 1.5"),
        ("warm_switch_s: -1", "warm_switch_s must be seconds, >= 0, got -1"),
        ("- a list", "expected a mapping"),
        ("", "states no hardware (it is empty, or comments only)"),
        ("# rollout: {name: H20}\n", "or leave out --cluster for the default cluster"),
        ("rollout: {name: [", "is not YAML"),
        ("warm_switch_s: 500\ncold_switch_s: 100", "warm_switch_s (500) is longer than cold_switch_s (100)"),
        ("warm_switch_s: 200", "warm_switch_s (200) is longer than cold_switch_s (135)"),  # the default cold
    ],
)
def test_a_bad_cluster_file_is_refused_with_what_to_fix(tmp_path, text, says):
    with pytest.raises(ValueError, match="cluster file") as err:
        load_cluster(_yaml(tmp_path, text))
    assert says in str(err.value)


def test_every_problem_is_listed_at_once(tmp_path):
    with pytest.raises(ValueError) as err:
        load_cluster(_yaml(tmp_path, "train: {price_per_gpu_hour: -1}\nfoo: 1\ncold_switch_s: x\n"))
    assert "3 problem(s)" in str(err.value)


def test_only_price_ratios_shape_decisions_so_scaled_prices_scale_every_cost(tmp_path, capsys):
    # Both pools at 3x the price: every policy places the same way, every $/h triples.
    path = _yaml(tmp_path, "rollout: {price_per_gpu_hour: 3.0}\ntrain: {price_per_gpu_hour: 8.55}\n")
    assert cli.main(["compare", "--jobs", "10", "--seed", "2", "--json"]) == 0
    base = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(["compare", "--jobs", "10", "--seed", "2", "--json", "--cluster", str(path)]) == 0
    tripled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for name, cost in base["cost_per_hour"].items():
        assert tripled["cost_per_hour"][name] == pytest.approx(3 * cost, rel=2e-3)
    assert tripled["slo_attainment"] == base["slo_attainment"]
    assert tripled["cluster"]["train"]["price_per_gpu_hour"] == 8.55
    assert base["cluster"]["train"]["name"] == "H800"


def test_a_dearer_training_class_reaches_every_policy(tmp_path, capsys):
    # Colocated runs its rollouts on training-class GPUs: the dearer those
    # are, the more RollMux, which runs them on rollout-class ones, saves over it.
    dear = _yaml(tmp_path, "train: {price_per_gpu_hour: 6.0}\n")
    assert cli.main(["compare", "--seeds", "0", "--jobs", "30", "--json", "--workers", "1"]) == 0
    paper = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert cli.main(["compare", "--seeds", "0", "--jobs", "30", "--json", "--workers", "1", "--cluster", str(dear)]) == 0
    dearer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert dearer["cluster"]["train"]["price_per_gpu_hour"] == 6.0
    assert dearer["cost_per_hour"]["solo"]["mean"] > paper["cost_per_hour"]["solo"]["mean"] * 1.5
    saving = lambda doc, over: doc["rollmux_saving"][over]["mean"]  # noqa: E731
    assert saving(dearer, "colocated") > saving(paper, "colocated") * 1.1
    assert saving(dearer, "solo") > 1.2 and dearer["slo_attainment"]["rollmux"]["min"] == 1.0


def test_other_commands_take_the_cluster_too(tmp_path, capsys):
    path = _yaml(tmp_path, "train: {host_mem_gb: 2048}\n")
    assert cli.main(["scale", "--jobs", "20", "--json", "--cluster", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["cluster"]["train"]["host_mem_gb"] == 2048
    args = ["optimality", "--instances", "1", "--jobs", "3", "--budget", "50", "--json", "--cluster", str(path)]
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["cluster"]["train"]["host_mem_gb"] == 2048
    assert cli.main(["repack", "--jobs", "12", "--snapshots", "1", "--cluster", str(tmp_path / "none.yaml")]) == 2
    assert "cannot read cluster file" in capsys.readouterr().err
