"""Periodic re-planning: running jobs re-placed from scratch, moved between iterations."""

from dataclasses import replace

import pytest

from roll_agentic.mux.batch import GroupAssessor
from roll_agentic.mux.candidates import new_group_placement
from roll_agentic.mux.group import CandidateKind, GroupBook
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.replan import Replanner, move_keeps_slo, worst_groups
from roll_agentic.sim.trace import WorkloadSpec, generate_trace

SPEC = ClusterSpec(migration=True)


def prof(i: int, rho: float, slo: float = 1.5, n_r: int = 1, n_t: int = 1) -> JobProfile:
    length = 2000.0
    return JobProfile(
        job_id=f"j{i}", kind="balanced", size="small", n_rollout=n_r, n_train=n_t,
        roll_s=rho * length, train_s=(1 - rho) * length, sync_s=10.0, local_sync_s=2.5,
        train_mem_gb=100.0, rollout_mem_gb=14.0, slo=slo,
    )


def test_a_move_is_refused_when_the_slo_could_not_absorb_it():
    p = prof(0, 0.5, slo=1.3)
    it = p.planned_iter_s
    # Ten iterations done at solo speed, ninety to go: room for a cold start.
    assert move_keeps_slo(p, 10 * it, 10 * it, 90, SPEC, 0.05)
    # At its SLO after ninety, with ten to go: a move (a cold start per phase
    # and two iterations while the new group forms) would break it.
    assert not move_keeps_slo(p, 90 * it * 1.3, 90 * it, 10, SPEC, 0.05)
    assert move_keeps_slo(p, 90 * it * 1.25, 90 * it, 10, SPEC, 0.05)


def test_two_jobs_alone_are_planned_together_and_the_group_forms_as_they_move():
    a, b = prof(0, 0.7), prof(1, 0.3)  # complementary: one node of each pool serves both
    book = GroupBook(SPEC)
    for job in (a, b):
        book.apply(new_group_placement(job, SPEC), job)
    home = {j: gid for gid, g in book.groups.items() for j in g.members}
    replanner = Replanner(margin=0.02)
    policy = RollMuxPolicy(SPEC)
    assert replanner.plan(book.groups, home, policy.place_batch, SPEC, policy.headroom, joins=2)
    assert set(replanner.targets) == {"j0", "j1"} and replanner.replans == 1
    assert not replanner.plan(book.groups, home, policy.place_batch, SPEC, policy.headroom, 2)
    # The first to move opens the planned group's nodes...
    first = replanner.take("j0")
    placement, plan_nodes = replanner.placement(first, book.groups)
    assert placement.kind is CandidateKind.NEW_GROUP and len(plan_nodes) == 2
    book.remove("j0")
    group, opened = book.apply(placement, a)
    replanner.moved("j0", first, group, plan_nodes, [n.node_id for n in opened])
    assert replanner.forming() == {group.group_id}  # nobody else is placed there meanwhile
    # ...and the second pins to them.
    second = replanner.take("j1")
    placement, plan_nodes = replanner.placement(second, book.groups)
    assert placement.kind is CandidateKind.SHARE and plan_nodes == []
    assert set(placement.rollout_nodes + placement.train_nodes) == set(group.nodes)
    book.remove("j1")
    group, opened = book.apply(placement, b)
    replanner.moved("j1", second, group, plan_nodes, [n.node_id for n in opened])
    assert replanner.forming() == set() and len(book.groups) == 1
    assert list(group.pinning) == sorted(group.pinning, key=lambda j: replanner.order[j])


def _book_of(pairs: list[tuple[JobProfile, JobProfile | None]]) -> GroupBook:
    """A book with one group per pair: the first job alone, the second (if any) packed with it."""
    book = GroupBook(SPEC)
    for first, second in pairs:
        group, _ = book.apply(new_group_placement(first, SPEC), first)
        if second is not None:
            pin = group.pinning[first.job_id]
            book.apply(
                replace(new_group_placement(second, SPEC), kind=CandidateKind.PACK,
                        group_id=group.group_id, rollout_nodes=pin.rollout_nodes,
                        train_nodes=pin.train_nodes, new_rollout=0, new_train=0),
                second,
            )
    return book


def test_worst_groups_are_those_that_save_least_over_solo():
    # Two packed complementary pairs save; two jobs alone save nothing.
    book = _book_of([(prof(0, 0.7), prof(1, 0.3)), (prof(2, 0.5), None),
                     (prof(3, 0.7), prof(4, 0.3)), (prof(5, 0.5), None)])
    assessor = GroupAssessor(SPEC, 0.05)
    lone = {g for g, grp in book.groups.items() if len(grp.members) == 1}
    assert set(worst_groups(book.groups, assessor, SPEC, 2)) == lone
    assert set(worst_groups(book.groups, assessor, SPEC, 1)) < lone  # one group holds one job
    assert len(worst_groups(book.groups, assessor, SPEC, 3)) == 3  # and one pair: 4 jobs >= 3
    assert worst_groups(book.groups, assessor, SPEC, 99) == book.groups


def test_a_limited_replan_moves_only_the_jobs_of_the_worst_groups():
    # The pair packs well already; the two lone jobs are re-planned together.
    book = _book_of([(prof(0, 0.7), prof(1, 0.3)), (prof(2, 0.7), None), (prof(3, 0.3), None)])
    home = {j: gid for gid, g in book.groups.items() for j in g.members}
    replanner = Replanner(margin=0.02, limit=2)
    policy = RollMuxPolicy(SPEC)
    assert replanner.plan(book.groups, home, policy.place_batch, SPEC, policy.headroom, 4)
    assert set(replanner.targets) == {"j2", "j3"}


def test_replanning_a_trace_costs_less_and_keeps_every_slo():
    trace = generate_trace(0, WorkloadSpec(n_jobs=40, span_days=2.0, h_min=12, h_max=36))
    online = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(trace.jobs)
    replanned = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, replan_every_h=6.0)).run(trace.jobs)
    assert online.replans == 0 and online.replan_time_s == 0.0
    assert replanned.replans > 0 and replanned.moves > online.moves
    assert replanned.replan_time_s > 0.0
    assert replanned.slo_attainment == 1.0
    assert replanned.total_cost < online.total_cost * 0.98
    assert {j.job_id for j in replanned.jobs} == {j.profile.job_id for j in trace.jobs}
    assert all(j.iters_done == j.n_iters for j in replanned.jobs)


def test_replans_search_with_their_own_budget(monkeypatch):
    # A re-plan places every running job at once: its batch search gets
    # `replan_budget` placements, arrivals keep `batch_budget`.
    import roll_agentic.mux.placement as placement

    budgets = []
    real = placement.search_batch
    monkeypatch.setattr(
        placement, "search_batch", lambda *a, **kw: budgets.append(a[5]) or real(*a, **kw)
    )
    trace = generate_trace(0, WorkloadSpec(n_jobs=20, span_days=1.0, h_min=12, h_max=24))
    policy = RollMuxPolicy(SPEC, replan_every_h=6.0, replan_budget=37)
    ClusterSimulator(SPEC, policy).run(trace.jobs)
    assert budgets and set(budgets) == {37}


def test_a_replan_builds_one_plan_dearest_first_with_share_any(monkeypatch):
    # Default `replan_budget` 0: no search, one plan over the jobs dearest
    # first, each placed with `share_any` candidates.
    import roll_agentic.mux.placement as placement

    searched = []
    monkeypatch.setattr(placement, "search_batch", lambda *a, **kw: searched.append(a))
    jobs = [prof(0, 0.5), prof(1, 0.6, n_r=2), prof(2, 0.4, n_t=2), prof(3, 0.3, n_r=4, n_t=2)]
    policy = RollMuxPolicy(SPEC)
    steps = policy.replan_plan({}, jobs)
    assert not searched
    assert [s.job.job_id for s in steps] == ["j3", "j2", "j1", "j0"]
    dearest = sorted(jobs, key=lambda j: -j.solo_cost_per_hour(SPEC))
    shared = RollMuxPolicy(SPEC, share_any=True)
    book, expected = GroupBook.scratch({}, SPEC), []
    for j in dearest:
        expected.append(shared.place(book.groups, j))
        book.apply(expected[-1], j)
    assert [s.placement for s in steps] == expected
    assert any(p.kind is not CandidateKind.NEW_GROUP for p in expected)  # they share
    # A budget brings the search back.
    monkeypatch.setattr(placement, "search_batch", lambda *a, **kw: searched.append(a[5]) or [])
    RollMuxPolicy(SPEC, replan_budget=100).replan_plan({}, jobs)
    assert searched == [100]


def test_cli_replan_flag(capsys):
    import json

    from roll_agentic.sim import cli

    cli.main(["compare", "--jobs", "12", "--seed", "1", "--replan", "6", "--json"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["rollmux_options"]["replan_every_h"] == 6.0
    assert doc["rollmux_options"]["replan_budget"] == 0
    cli.main(["compare", "--jobs", "12", "--seed", "1", "--replan", "6", "--replan-budget", "100"])
    out = capsys.readouterr().out
    assert "--replan 6 --replan-budget 100" in out
    assert cli.main(["compare", "--jobs", "12", "--replan-budget", "100"]) == 2
    assert "give --replan HOURS too" in capsys.readouterr().err
    for hours in ("-1", "0.0001"):  # a tiny period ran for minutes on five jobs
        with pytest.raises(SystemExit):
            cli.main(["compare", "--replan", hours])
        assert "must be 0 (off) or at least 0.1 hours" in capsys.readouterr().err
