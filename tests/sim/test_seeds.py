import json
import tracemalloc

import pytest

from roll_agentic.mux.profile import ClusterSpec
from roll_agentic.sim import cli
from roll_agentic.sim.compare import compare
from roll_agentic.sim.options import RollMuxOptions
from roll_agentic.sim.seeds import MAX_SEEDS, SeedRun, compare_seeds, parse_seeds
from roll_agentic.sim.trace import WorkloadSpec, generate_trace


def test_seed_lists_take_ranges_and_lists_in_the_order_given():
    assert parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert parse_seeds("7,3, 0") == [7, 3, 0]
    assert parse_seeds("0-2,9") == [0, 1, 2, 9]
    assert parse_seeds("5") == [5]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("3-1", "low-high"),
        ("0,a", "a range such as 0-4"),
        ("-1", "a range such as 0-4"),
        ("0,0", "twice"),
        ("1-3,2", "twice"),
        ("", "a range such as 0-4"),
        (f"0-{MAX_SEEDS}", f"more than {MAX_SEEDS}"),
    ],
)
def test_bad_seed_lists_are_refused_with_what_to_write(text, says):
    with pytest.raises(ValueError, match=says):
        parse_seeds(text)


def test_a_range_too_wide_is_counted_not_listed():
    """Before, `0-30000000` was listed (1.2 GB, 8 s) just to be refused; now its width is counted first."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"^seed list '0-2000000' names more than {MAX_SEEDS} seeds$"):
            parse_seeds("0-2000000")  # listed, about 60 MB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    # Seeds before the range count toward the limit; the limit itself is taken.
    with pytest.raises(ValueError, match=f"'0,1,3-{MAX_SEEDS + 1}' names more than {MAX_SEEDS} seeds"):
        parse_seeds(f"0,1,3-{MAX_SEEDS + 1}")  # 2 + 63
    assert parse_seeds(f"0,1,3-{MAX_SEEDS}") == [0, 1, *range(3, MAX_SEEDS + 1)]  # 2 + 62
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1}")) == MAX_SEEDS


def test_every_seed_matches_its_own_comparison_and_workers_change_nothing():
    share = RollMuxOptions(share_any=True)
    run = SeedRun(jobs=10, options=share, spec=ClusterSpec(migration=True, rollout_fifo=True))
    alone = compare_seeds([3, 1], run, workers=1)
    pooled = compare_seeds([3, 1], run, workers=2)
    assert alone == pooled
    assert [r["seed"] for r in alone["per_seed"]] == [3, 1]
    for row in alone["per_seed"]:
        doc, _ = compare(
            generate_trace(row["seed"], WorkloadSpec(n_jobs=10)), rollout_fifo=True, options=share
        )
        assert row["cost_per_hour"] == doc["cost_per_hour"]
        assert row["slo_attainment"] == doc["slo_attainment"]
        assert row["rollmux_saving"] == doc["rollmux_saving"]
        assert row["alone_cost_share"] == doc["cost_share_by_group_size"]["rollmux"].get("1", 0.0)
        assert row["alone_cost_share_by_slo"] == doc["alone_cost_share_by_slo"]["rollmux"]
    shares = [r["alone_cost_share"] for r in alone["per_seed"]]
    assert alone["rollmux_alone_cost_share"]["max"] == max(shares)
    for name, spread in alone["rollmux_saving"].items():
        values = [r["rollmux_saving"][name] for r in alone["per_seed"]]
        assert spread["min"] == min(values) and spread["max"] == max(values)
        assert spread["min"] <= spread["mean"] <= spread["max"]
    assert alone["rollout_fifo"] is True and alone["rollmux_options"]["share_any"] is True


def test_cli_seeds_prints_a_row_per_seed_and_json_last(capsys):
    assert cli.main(["compare", "--jobs", "8", "--seeds", "0-1", "--workers", "1"]) == 0
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].split()[0] == "seed"
    assert [line.split()[0] for line in table[1:6]] == ["0", "1", "min", "mean", "max"]
    assert "seeds [0, 1]" in table[-1]
    # every column has its spread (solo's and colocated's $/h were blank), and the SLO columns are named
    solo = [float(line.split()[1]) for line in table[1:3]]
    assert [float(line.split()[1]) for line in table[3:6:2]] == [min(solo), max(solo)]
    assert "SLO rollmux, random, greedy: each policy's SLO attainment" in table[-1]
    assert cli.main(["compare", "--jobs", "8", "--seeds", "2", "--json", "--rehome"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["seeds"] == [2] and doc["rollmux_options"]["rehome"] is True
    assert set(doc["slo_attainment"]["rollmux"]) == {"min", "mean", "max"}


@pytest.mark.parametrize("flag", [["--trace", "t.json"], ["--plot", "out"], ["--save-trace", "t.json"]])
def test_cli_seeds_refuses_options_of_a_single_trace(flag, capsys):
    assert cli.main(["compare", "--seeds", "0-1", *flag]) == 2
    assert f"does not combine with {flag[0]}" in capsys.readouterr().err


def test_cli_seeds_refuses_a_bad_list_in_one_line(capsys):
    assert cli.main(["compare", "--seeds", "4-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("roll-agentic sim compare: error:") and "\n" not in err


def test_cli_slo_range_draws_the_generated_traces_slos(tmp_path, capsys):
    saved = tmp_path / "t.json"
    argv = ["compare", "--jobs", "12", "--seed", "2", "--slo", "1.5", "1.8", "--json"]
    assert cli.main([*argv, "--save-trace", str(saved)]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["slo_range"] == [1.5, 1.8]
    slos = [j["profile"]["slo"] for j in json.loads(saved.read_text())["jobs"]]
    assert all(1.5 <= s <= 1.8 for s in slos)
    # The same trace otherwise: only the SLOs differ from the default draw.
    default = generate_trace(2, WorkloadSpec(n_jobs=12))
    loose = generate_trace(2, WorkloadSpec(n_jobs=12, slo_range=(1.5, 1.8)))
    assert [j.arrival_s for j in loose.jobs] == [j.arrival_s for j in default.jobs]
    # Looser SLOs never make RollMux dearer than solo, and every SLO is still met.
    assert doc["slo_attainment"]["rollmux"] == 1.0
    assert doc["cost_per_hour"]["rollmux"] <= doc["cost_per_hour"]["solo"]
    assert cli.main(["compare", "--jobs", "8", "--seeds", "0-1", "--workers", "1",
                     "--slo", "2", "2", "--json"]) == 0
    seeds_doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seeds_doc["slo_range"] == [2.0, 2.0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--slo", "0.9", "2"], "1 <= LO <= HI"),
        (["--slo", "2", "1.5"], "1 <= LO <= HI"),
        (["--slo", "nan", "2"], "1 <= LO <= HI"),
        (["--slo", "1", "inf"], "at most 100"),
        (["--slo", "1", "2", "--trace", "t.json"], "has its own"),
    ],
)
def test_cli_slo_range_refuses_what_is_no_slowdown_in_one_line(argv, says, capsys):
    assert cli.main(["compare", "--jobs", "4", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
