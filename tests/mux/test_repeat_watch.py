"""Ending a round-robin run once it repeats itself (`mux/repeat_watch.py`)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roll_agentic.mux import repeat_watch
from roll_agentic.mux.profile import PhaseTimes
from roll_agentic.mux.repeat_watch import RepeatWatch
from roll_agentic.mux.round_robin import MemberPlan, evaluate_round_robin
from tests.mux.test_round_robin import gang_groups


def _without_watch(members, meta_iterations, switch_s):
    """The run to its full length, as before the watch."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(repeat_watch.RepeatWatch, "periods", lambda self, *state: None)
        return evaluate_round_robin(members, meta_iterations, switch_s)


@settings(max_examples=300, deadline=None)
@given(gang_groups(), st.sampled_from([0.0, 1.9]))
def test_stopping_early_gives_the_periods_of_the_full_run(members, switch_s):
    # The full run reads its periods from its second half (past the cold
    # start); a run that stopped on a repeat must give the same ones.
    full = _without_watch(members, 6 + 3 * len(members), switch_s)
    assert evaluate_round_robin(members, switch_s=switch_s) == pytest.approx(full, rel=1e-9)


def test_an_unsaturated_group_stops_after_a_few_meta_iterations(monkeypatch):
    calls = []
    real = RepeatWatch.periods

    def counted(self, free, last, ready):
        calls.append(1)
        return real(self, free, last, ready)

    monkeypatch.setattr(RepeatWatch, "periods", counted)
    a = MemberPlan(PhaseTimes(600, 400, 10), (0,), (1,))
    b = MemberPlan(PhaseTimes(300, 200, 10), (0,), (1,))
    c = MemberPlan(PhaseTimes(100, 150, 10), (0, 2), (1,))
    periods = evaluate_round_robin([a, b, c], switch_s=1.9)
    assert len(calls) <= 4 < 6 + 3 * 3  # the fixed length it used to run
    # The longest job's solo iteration plus its warm switches, shared by all.
    assert periods == pytest.approx([1010 + 2 * 1.9] * 3)


def test_watch_needs_a_previous_state_and_the_same_last_phases():
    watch = RepeatWatch([[0]], [[1]], 2)
    assert watch.periods([10.0, 20.0], [0, 1], [25.0]) is None  # nothing to compare with
    assert watch.periods([110.0, 120.0], [0, 3], [125.0]) is None  # a node ran another phase
    assert watch.periods([210.0, 220.0], [0, 3], [225.0]) == [100.0]


def test_watch_lets_independent_members_keep_their_own_period():
    # Members 0 and 1 share node 0; member 2 shares nothing with them.
    watch = RepeatWatch([[0], [0], [2]], [[1], [1], [3]], 4)
    watch.periods([5.0, 9.0, 3.0, 4.0], [0, 1, 4, 5], [10.0, 11.0, 6.0])
    got = watch.periods([105.0, 109.0, 53.0, 54.0], [0, 1, 4, 5], [110.0, 111.0, 56.0])
    assert got == [100.0, 100.0, 50.0]
    # Linked members that drift apart (one still spending a lead) have not settled.
    assert watch.periods([205.0, 209.0, 103.0, 104.0], [0, 1, 4, 5], [209.0, 211.0, 106.0]) is None
