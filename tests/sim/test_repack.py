"""sim repack: online RollMux against the running jobs re-placed from scratch."""

import json

import pytest

from roll_agentic.mux.profile import ClusterSpec
from roll_agentic.sim import cli
from roll_agentic.sim.repack import repack_report
from roll_agentic.sim.trace import WorkloadSpec, generate_trace

SPEC = ClusterSpec(migration=True)


def test_repack_prices_the_running_jobs_four_ways_at_each_instant():
    trace = generate_trace(4, WorkloadSpec(n_jobs=40, span_days=2.0))
    doc = repack_report(trace, SPEC, snapshots=2)
    assert doc["snapshots"] == 2
    for r in doc["per_snapshot"]:
        assert r["jobs"] >= 2
        # Sharing never costs more than solo per unit of progress, online or repacked.
        assert r["online"] <= r["solo"] and r["repacked"] <= r["solo"]
        assert r["colocated"] > 0
    rows = doc["per_snapshot"]
    mean = sum(r["online"] / r["repacked"] for r in rows) / len(rows)
    assert doc["online_over_repacked"] == pytest.approx(mean, abs=1e-3)
    assert doc["repacked_saving"]["solo"] == pytest.approx(
        sum(r["solo"] / r["repacked"] for r in rows) / len(rows), abs=1e-3
    )


def test_repack_cli_table_json_and_bad_input(capsys):
    assert cli.main(["repack", "--jobs", "30", "--seed", "2", "--snapshots", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(doc["online_saving"]) == {"solo", "colocated"}
    assert doc["rollout_fifo"] is False and doc["share_any"] is False
    cli.main(["repack", "--jobs", "30", "--seed", "2", "--snapshots", "1"])
    assert "online over repacked" in capsys.readouterr().out
    args = ["--jobs", "30", "--seed", "2", "--snapshots", "1", "--rollout-fifo", "--share-any"]
    assert cli.main(["repack", *args, "--json"]) == 0
    fifo = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert fifo["rollout_fifo"] is True and fifo["share_any"] is True
    with pytest.raises(SystemExit):
        cli.main(["repack", "--snapshots", "0"])
    assert "must be at least 1" in capsys.readouterr().err


def test_sim_commands_answer_a_bad_trace_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"jobs": []}')
    for command in ("compare", "repack"):
        assert cli.main([command, "--trace", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"roll-agentic sim {command}: error: trace ") and "\n" not in err
