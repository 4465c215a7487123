"""`sim optimality`'s table says where the optimum's search stopped at its budget."""

from roll_agentic.cli import main


def test_a_search_cut_at_its_budget_is_said_in_the_table(capsys):
    main(["sim", "optimality", "--instances", "3", "--jobs", "4", "--budget", "50"])
    out = capsys.readouterr().out
    assert "the search stopped at its budget (50 placements) on " in out
    assert "there the optimum is the best found (--budget N)" in out
