"""Brute-force optimum, hardware affinity, and the `sim` command line."""

import json
from dataclasses import replace

import pytest

from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile
from roll_agentic.sim import cli
from roll_agentic.sim.affinity import DEFAULT_TASKS, H20_GPU, H800_GPU, affinity_report
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.optimal import ReplayPolicy, Step, job_steps, solve
from roll_agentic.sim.trace import TraceJob

SPEC = ClusterSpec()


def prof(i, rho, length=1800.0, slo=1.5):
    return JobProfile(
        f"j{i}", "x", "small", 1, 1, rho * length, (1 - rho) * length, 8.0, 2.0, 112.0, 14.0, slo
    )


def test_optimum_finds_the_complementary_pairing_and_replays_it():
    # Arrival order a, a', b, b' tempts a greedy pass into pairing a with a'.
    jobs = [prof(0, 0.72), prof(1, 0.70), prof(2, 0.30), prof(3, 0.28)]
    sol = solve(jobs, SPEC)
    assert sol.complete
    solo = sum(j.solo_cost_per_hour(SPEC) for j in jobs) / len(jobs)
    assert sol.objective < solo / 1.8
    trace = [TraceJob(0.0, 100_000, seed=i, profile=p) for i, p in enumerate(jobs)]
    horizon = 40 * 1810.0
    opt = ClusterSimulator(SPEC, ReplayPolicy(SPEC, sol.steps), horizon_s=horizon).run(trace)
    mux = ClusterSimulator(SPEC, RollMuxPolicy(SPEC), horizon_s=horizon).run(trace)
    work = lambda r: sum(j.solo_s for j in r.jobs) / 3600  # noqa: E731
    assert opt.total_cost / work(opt) <= mux.total_cost / work(mux) * 1.02
    assert opt.slo_attainment == 1.0


def test_the_optimum_also_tries_fewer_rollout_nodes():
    # The space RollMux searches (`rollout_shrink`) is inside the optimum's.
    big = replace(prof(0, 0.3), n_rollout=2)
    book = GroupBook(SPEC)
    assert Step(None, (), (), 1, 1) in job_steps(book, big, [2, 1])
    assert Step(None, (), (), 1, 1) not in job_steps(book, big, [2])
    book.apply(RollMuxPolicy(replace(SPEC, rollout_shrink=False)).place(book.groups, prof(1, 0.3)), prof(1, 0.3))
    steps = job_steps(book, big, [2, 1])
    assert Step(0, (0,), (1,), 0, 0) in steps  # on the group's one rollout node, no new one
    assert Step(0, (0,), (1,), 1, 0) in steps  # or with one of its own beside it


def test_task_affine_pools_beat_every_single_pool():
    doc = affinity_report()
    assert doc["routing"]["math"] == "H20"  # decode-heavy: bandwidth per dollar
    assert doc["routing"]["frozenlake"] == "H800"  # re-prefilled contexts: compute
    assert all(v >= 1.0 for v in doc["affinity_vs_pool"].values())
    assert doc["affinity_vs_single_pool"] == min(doc["affinity_vs_pool"].values())
    # One task only: nothing to gain from affinity.
    solo = affinity_report(
        tasks=(replace(DEFAULT_TASKS[0], weight=1.0),), classes=(H20_GPU, H800_GPU)
    )
    assert solo["affinity_vs_single_pool"] == 1.0
    assert doc["assumed"]["gpu_classes"][1]["price_per_hour"] == 2.85


def test_cli_compare_json_last_line_and_plots(tmp_path, capsys):
    trace_file = tmp_path / "t.json"
    rc = cli.main(
        [
            "compare",
            "--jobs",
            "12",
            "--seed",
            "2",
            "--json",
            "--save-trace",
            str(trace_file),
            "--plot",
            str(tmp_path / "plots"),
        ]
    )
    assert rc == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(doc["cost_per_hour"]) == {"solo", "colocated", "random", "greedy", "rollmux"}
    assert set(doc["slo_attainment"]) == set(doc["cost_per_hour"])
    assert "utilization" in doc
    assert doc["migration"] is True  # long-tail migration is on unless turned off
    assert (tmp_path / "plots" / "cost_over_time.png").stat().st_size > 0
    assert (tmp_path / "plots" / "gantt_rollmux.png").stat().st_size > 0
    slo_png = tmp_path / "plots" / "slowdown_vs_slo.png"
    assert slo_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # a real PNG, one panel per policy
    assert str(slo_png) in doc["plots"]
    # The saved trace replays to the same figures.
    cli.main(["compare", "--trace", str(trace_file), "--json"])
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["cost_per_hour"] == doc["cost_per_hour"]
    cli.main(["compare", "--trace", str(trace_file), "--json", "--no-migration"])
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (
        plain["migration"] is False
        and plain["cost_per_hour"]["solo"] == doc["cost_per_hour"]["solo"]
    )
    assert doc["rollout_fifo"] is False  # rollout nodes take turns unless asked
    cli.main(["compare", "--trace", str(trace_file), "--json", "--rollout-fifo", "--share-any"])
    fifo = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert fifo["rollout_fifo"] is True and fifo["rollmux_options"]["share_any"] is True
    assert fifo["cost_per_hour"]["solo"] == doc["cost_per_hour"]["solo"]  # dedicated nodes: no queue
    assert fifo["slo_attainment"]["rollmux"] == 1.0
    assert doc["rollmux_options"]["bank_slack"] is False
    cli.main(["compare", "--trace", str(trace_file), "--bank-slack"])
    table = capsys.readouterr().out.strip().splitlines()
    assert table[-1].endswith("beyond the paper: --bank-slack")


def test_cli_affinity_and_human_table(capsys):
    assert cli.main(["affinity", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["affinity_vs_single_pool"] > 1.0 and "assumed" in doc
    cli.main(["compare", "--jobs", "6", "--seed", "1"])
    out = capsys.readouterr().out
    assert "rollmux" in out and "SLO met" in out


def test_the_optimum_obeys_rollmux_feasibility_rules_and_its_budget():
    from roll_agentic.mux.group import GroupBook
    from roll_agentic.mux.round_robin import evaluate_round_robin, members_of
    from roll_agentic.sim.optimal import to_placement

    jobs = [prof(i, rho, slo=s) for i, (rho, s) in enumerate([(0.7, 1.2), (0.3, 1.9), (0.6, 1.1)])]
    sol = solve(jobs, SPEC)
    assert sol.complete
    book = GroupBook(SPEC)
    for step, j in zip(sol.steps, jobs, strict=True):
        book.apply(to_placement(book, step, j, SPEC), j)
    for g in book.groups.values():  # the SLO check with RollMux's headroom
        if len(g.members) > 1:
            periods = evaluate_round_robin(members_of(g, SPEC), switch_s=SPEC.warm_switch_s)
            ok = zip(periods, g.members.values(), strict=True)
            assert all(t * (1 + SLO_HEADROOM) <= p.slo * p.planned_iter_s for t, p in ok)
        assert all(n.mem_used_gb <= n.mem_capacity_gb for n in g.nodes.values())
    capped = solve(jobs, SPEC, node_budget=3)
    # Placements tried, then stop (each open level notices once on its way out).
    assert not capped.complete and capped.visited <= 3 + len(jobs)


def test_scale_counts_regrouping_as_scheduler_time():
    from roll_agentic.sim.compare import scale

    doc = scale(60)
    parts = doc["placement_time_s"] + doc["regroup_time_s"]
    assert doc["scheduler_time_s_60_jobs"] == pytest.approx(parts, abs=2e-4)
    assert doc["slo_attainment"] == 1.0


def test_cli_scale_prints_the_total_against_the_paper_then_its_parts(capsys):
    assert cli.main(["scale", "--jobs", "40", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("40 jobs placed by RollMux: ") and "s of scheduler CPU in all" in lines[0]
    parts = {line.split("  ")[1].strip(): line for line in lines[1:4]}
    assert set(parts) == {"placement on arrival", "between iterations", "re-plans"}
    assert "moves; trims and checks too)" in parts["between iterations"]
    assert lines[4].startswith("SLO attainment 1.0; long-tail migration on; rollout nodes in round-robin turns")
    assert "H20 x8, 1 per GPU-hour" in lines[5] and "H800 x8, 2.85 per GPU-hour" in lines[5]
    assert "beyond the paper" not in lines[4]
    options = ["scale", "--jobs", "40", "--seed", "1", "--bank-slack", "--replan", "6"]
    assert cli.main(options) == 0
    assert capsys.readouterr().out.splitlines()[4].endswith("; beyond the paper: --bank-slack --replan 6")
    assert cli.main([*options, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["rollmux_options"]["bank_slack"] is True and doc["rollmux_options"]["replan_every_h"] == 6.0


def test_cli_optimality_reports_rollmux_and_what_the_optimum_saves(capsys):
    cli.main(["optimality", "--instances", "3", "--jobs", "4", "--seed", "2", "--json"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = doc["per_instance"]
    assert len(rows) == 3 and doc["rollmux_slo_attainment"] == 1.0
    assert 1.0 - 1e-9 <= doc["max_ratio_to_optimal"] == max(r["ratio"] for r in rows)
    for name in ("solo", "colocated"):
        got = [r[f"{name}_over_optimal"] for r in rows]
        assert doc["optimal_saving"][name]["mean"] == pytest.approx(sum(got) / 3, abs=1e-3)
        assert doc["optimal_saving"][name]["max"] == max(got)
    # Solo is one of the placements the search ranks: the optimum pays no more.
    assert min(r["solo_over_optimal"] for r in rows) >= 0.99
    cli.main(["optimality", "--instances", "1", "--jobs", "3"])
    assert "the optimum saves" in capsys.readouterr().out


def test_cli_full_rollout_reaches_every_command(capsys):
    for argv in (
        ["compare", "--jobs", "12", "--seed", "1"],
        ["scale", "--jobs", "12"],
        ["optimality", "--instances", "1", "--jobs", "3"],
        ["repack", "--jobs", "12", "--snapshots", "1"],
    ):
        for full in (False, True):
            assert cli.main([*argv, "--json", *(["--full-rollout"] if full else [])]) == 0
            doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            assert doc["rollout_shrink"] is not full, argv


def test_the_gantt_window_starts_at_the_first_phase(tmp_path, monkeypatch):
    """A trace whose jobs arrive at hour 100 drew empty Gantt charts (the window was hours 0-12)."""
    from roll_agentic.sim import plots

    header = "arrival_h,params_b,rollout_nodes,train_nodes,rollout_s,train_s,slo,run_h"
    path = tmp_path / "late.csv"
    path.write_text(f"{header}\n100,7,1,1,900,1100,1.3,48\n")
    drawn: list[int] = []
    real_barh = plots.plt.Axes.barh

    def counting_barh(self, *args, **kwargs):
        drawn.append(1)
        return real_barh(self, *args, **kwargs)

    monkeypatch.setattr(plots.plt.Axes, "barh", counting_barh)
    assert cli.main(["compare", "--trace", str(path), "--plot", str(tmp_path / "p")]) == 0
    assert len(drawn) > 0


def test_the_table_says_where_the_plots_went(tmp_path, capsys):
    """Without --json, `--plot DIR` wrote its PNGs and said nothing of them."""
    header = "arrival_h,params_b,rollout_nodes,train_nodes,rollout_s,train_s,slo,run_h"
    path = tmp_path / "one.csv"
    path.write_text(f"{header}\n0,7,1,1,900,1100,1.3,4\n")
    assert cli.main(["compare", "--trace", str(path), "--plot", str(tmp_path / "p")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    pngs = sorted((tmp_path / "p").glob("*.png"))
    assert pngs and last == f"plots ({len(pngs)} PNGs) in {tmp_path / 'p'}"
