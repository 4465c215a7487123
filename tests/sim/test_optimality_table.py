"""`sim optimality`'s and `sim affinity`'s tables say what their figures are."""

from roll_agentic.cli import main


def test_a_search_cut_at_its_budget_is_said_in_the_table(capsys):
    main(["sim", "optimality", "--instances", "3", "--jobs", "4", "--budget", "50"])
    out = capsys.readouterr().out
    assert "the search stopped at its budget (50 placements) on " in out
    assert "there the optimum is the best found (--budget N)" in out
    # which rows: those instances are marked, as the footer's `*` says
    rows = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert any(line.endswith("  *") for line in rows)
    assert "the optimum is over disaggregated placements, so colocated/optimal may be below 1" in out


def test_affinity_says_which_way_its_ratios_run(capsys):
    main(["sim", "affinity"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "vs each: H20 only " in last and "single-pool $ per trajectory over affine" in last
