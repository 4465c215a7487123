"""Where a run's money goes by group (`sim/census.py`): sizes, and jobs alone by SLO band."""

import pytest

from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile
from roll_agentic.sim.baselines import SoloPolicy
from roll_agentic.sim.census import SLO_BANDS, size_label, slo_band
from roll_agentic.sim.cli import _census_line
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.compare import compare
from roll_agentic.sim.trace import TraceJob, WorkloadSpec, generate_trace

SPEC = ClusterSpec()


def small(i: int, slo: float, arrival: float = 0.0, seed: int | None = None) -> TraceJob:
    p = JobProfile(
        f"j{i}", "rollout_heavy", "small", 1, 1, 1260.0, 540.0, 8.0, 2.0, 112.0, 14.0, slo
    )
    return TraceJob(arrival, 20, seed=i if seed is None else seed, profile=p)


def test_bands_and_sizes_have_the_labels_the_tables_print():
    bands = [slo_band(s) for s in (1.0, 1.049, 1.05, 1.19, 1.2, 1.49, 1.5, 2.0)]
    assert bands == "<1.05 <1.05 1.05-1.2 1.05-1.2 1.2-1.5 1.2-1.5 >=1.5 >=1.5".split()
    assert [size_label(n) for n in (1, 2, 3, 4, 7)] == ["1", "2", "3", "4+", "4+"]


def test_a_job_whose_slo_leaves_no_room_is_booked_alone_and_partners_as_a_pair():
    # Two jobs that share a training node, and one whose 1.02 SLO is inside
    # RollMux's headroom: it runs alone for life.
    jobs = [small(0, 1.3), small(1, 1.3), small(2, 1.02)]
    r = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(jobs)
    assert set(r.cost_by_group_size) == {"1", "2"}
    assert sum(r.cost_by_group_size.values()) == pytest.approx(r.total_cost, rel=1e-9)
    # The pair finishes first; the lone stretch of whoever is left is booked too.
    assert r.alone_cost_by_slo["<1.05"] > 0.0
    assert sum(r.alone_cost_by_slo.values()) == pytest.approx(r.cost_by_group_size["1"], rel=1e-9)


def test_solo_spends_everything_on_jobs_alone_banded_by_their_slo():
    jobs = [small(i, slo, 500.0 * i, seed=0) for i, slo in enumerate((1.0, 1.1, 1.3, 1.9))]
    r = ClusterSimulator(SPEC, SoloPolicy(SPEC)).run(jobs)
    assert r.cost_by_group_size == {"1": pytest.approx(r.total_cost, rel=1e-9)}
    each = r.total_cost / 4  # same jobs, same phase lengths (one seed): the same cost each
    assert r.alone_cost_by_slo == {label: pytest.approx(each, rel=1e-9) for _, label in SLO_BANDS}


def test_moves_trims_and_horizons_keep_the_books_whole():
    # A trace where RollMux moves lone jobs, trims rollout nodes and, with
    # re-plans, moves jobs into planned groups; cut off at a horizon.
    trace = generate_trace(3, WorkloadSpec(n_jobs=40, span_days=3.0, h_min=12, h_max=36))
    for policy, horizon in (
        (RollMuxPolicy(SPEC), None),
        (RollMuxPolicy(SPEC, replan_every_h=6.0, rehome=True), None),
        (RollMuxPolicy(SPEC), 2.0 * 86400),
    ):
        r = ClusterSimulator(SPEC, policy, horizon_s=horizon).run(trace.jobs)
        assert r.moves > 0 or horizon is not None
        assert sum(r.cost_by_group_size.values()) == pytest.approx(r.total_cost, rel=1e-9)
        alone = sum(r.alone_cost_by_slo.values())
        assert alone == pytest.approx(r.cost_by_group_size.get("1", 0.0), rel=1e-9)


def test_compare_reports_shares_of_each_policys_cost():
    trace = generate_trace(4, WorkloadSpec(n_jobs=20, span_days=2.0, h_min=6, h_max=24))
    doc, _ = compare(trace, SPEC)
    for name in doc["cost_per_hour"]:
        sizes, alone = doc["cost_share_by_group_size"][name], doc["alone_cost_share_by_slo"][name]
        assert sum(sizes.values()) == pytest.approx(1.0, abs=1e-3)
        assert list(alone) == [label for _, label in SLO_BANDS]  # every band, in order
        assert sum(alone.values()) == pytest.approx(sizes.get("1", 0.0), abs=1e-3)
    assert doc["cost_share_by_group_size"]["solo"] == {"1": 1.0}
    assert doc["cost_share_by_group_size"]["rollmux"].get("1", 0.0) < 1.0
    line = _census_line(doc)
    assert line.startswith("rollmux's $: ") and "SLO <1.05" in line and "groups of 2" in line
    # Every job alone: no dangling "groups of".
    doc["cost_share_by_group_size"]["rollmux"] = {"1": 1.0}
    assert _census_line(doc).endswith("; no job shared a group")
