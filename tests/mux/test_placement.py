"""Inter-group placement: memory and SLO checks, candidate kinds, packing."""

import pytest

from roll_agentic.mux.batch import GroupAssessor
from roll_agentic.mux.candidates import (
    group_candidates,
    memory_ok,
    new_group_placement,
    rollout_options,
    slo_ok,
)
from roll_agentic.mux.group import CandidateKind, GroupBook, Placement, is_saturated
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool

SPEC = ClusterSpec()
FULL = ClusterSpec(rollout_shrink=False)  # every job on its own rollout node count


def job(i, rho=0.7, length=1800.0, slo=2.0, mem=112.0, n_r=1, n_t=1):
    return JobProfile(
        f"j{i}",
        "rollout_heavy",
        "small",
        n_r,
        n_t,
        rho * length,
        (1 - rho) * length,
        8.0,
        2.0,
        mem,
        14.0,
        slo,
    )


def place_all(policy, jobs):
    book = GroupBook(SPEC)
    for j in jobs:
        book.apply(policy.place(book.groups, j), j)
    return book


def test_memory_check_rejects_a_group_that_would_exceed_host_memory():
    book = GroupBook(SPEC)
    first = job(0, mem=600.0)
    group, _ = book.apply(new_group_placement(first, SPEC), first)
    pack = group_candidates(group, job(1, mem=600.0), SPEC)
    train = group.node_ids(Pool.TRAIN)
    probe = Placement(CandidateKind.PACK, group.group_id, train_nodes=tuple(train), new_rollout=1)
    assert not memory_ok(group, job(1, mem=600.0), probe)  # 600 + 600 > 1024 GB
    assert memory_ok(group, job(1, mem=400.0), probe)
    assert pack == []  # no candidate pins to a node without room
    policy = RollMuxPolicy(SPEC)
    assert policy.place(book.groups, job(1, mem=600.0)).kind is CandidateKind.NEW_GROUP


def test_slo_check_rejects_a_placement_that_breaks_a_members_slo():
    book = GroupBook(SPEC)
    short = job(0, rho=0.5, length=1000.0, slo=1.1)  # tolerates 10 % slowdown
    group, _ = book.apply(new_group_placement(short, SPEC), short)
    long = job(1, rho=0.25, length=1600.0, slo=2.0)  # would set a 1600 s cycle
    cand = Placement(
        CandidateKind.ADD_ROLLOUT,
        group.group_id,
        train_nodes=tuple(group.node_ids(Pool.TRAIN)),
        new_rollout=1,
    )
    assert not slo_ok(group, long, cand, SPEC)
    relaxed = job(0, rho=0.5, length=1000.0, slo=2.0)
    book2 = GroupBook(SPEC)
    g2, _ = book2.apply(new_group_placement(relaxed, SPEC), relaxed)
    assert slo_ok(g2, long, cand, SPEC)
    # The policy never picks the SLO-breaking candidate.
    assert RollMuxPolicy(SPEC).place(book.groups, long).kind is CandidateKind.NEW_GROUP


def test_rollout_heavy_jobs_share_a_training_node_three_ways():
    # 540 s of training each in an 1808 s cycle: three fit the idle window;
    # a fourth saturates the node (2167 s) past what a 15 % SLO tolerates.
    jobs = [job(i, slo=1.15) for i in range(9)]
    book = place_all(RollMuxPolicy(SPEC), jobs)
    solo = sum(j.solo_cost_per_hour(SPEC) for j in jobs)
    assert len(book.groups) == 3
    assert all(len(g.members) == 3 for g in book.groups.values())
    assert solo / book.cost_per_hour() > 1.9  # 3 x (8 + 22.8) / (3 x 8 + 22.8)


def test_complementary_jobs_pack_at_zero_extra_cost():
    a = job(0, rho=0.7, length=1800.0)
    b = job(1, rho=0.3, length=1800.0)  # train-heavy mirror image of a
    book = place_all(RollMuxPolicy(SPEC), [a])
    p = RollMuxPolicy(SPEC).place(book.groups, b)
    assert p.kind is CandidateKind.PACK and p.extra_cost_per_hour == 0


def test_saturated_group_with_slo_room_is_considered():
    # Two train-heavy jobs (1440 s of training each) tolerate a 2x slowdown:
    # the SLO check lets the second pack beside the first, which saturates
    # the training node (2880 s of training per 1808 s solo cycle).
    heavy = [job(i, rho=0.2, length=1800.0) for i in range(2)]
    book = place_all(RollMuxPolicy(SPEC), heavy)
    assert len(book.groups) == 1
    (group,) = book.groups.values()
    assert is_saturated(group, SPEC)
    # The paper would skip the group (no idle phase left); but a light
    # newcomer adds 30 s of training to a node its members may load up to
    # 2 x 1808 s, and its 3008 s iteration (which the round robin imposes
    # on them) is within that too: it shares the dear training node and
    # opens only a rollout node, keeping every SLO.
    light = job(2, rho=0.99, length=3000.0, slo=2.0)
    p = RollMuxPolicy(SPEC).place(book.groups, light)
    assert p.kind is CandidateKind.ADD_ROLLOUT and p.group_id == group.group_id
    assert p.extra_cost_per_hour < light.solo_cost_per_hour(SPEC)
    assert slo_ok(group, light, p, SPEC, SLO_HEADROOM)


def test_groups_loaded_past_an_slo_budget_are_not_simulated(monkeypatch):
    import roll_agentic.mux.placement as placement

    heavy = [job(i, rho=0.2, length=1800.0) for i in range(2)]
    book = place_all(RollMuxPolicy(SPEC), heavy)
    (group,) = book.groups.values()
    policy = RollMuxPolicy(SPEC)
    policy._group_view(group)  # the view is built beforehand, as between arrivals
    runs = []
    real = placement.evaluate_on
    monkeypatch.setattr(
        placement, "evaluate_on", lambda *a, **k: runs.append(1) or real(*a, **k)
    )
    # The training node serves 2 x 1332 s per meta-iteration: a newcomer
    # that tolerates no slowdown of its 1808 s iteration cannot keep its
    # SLO there, whatever its pinning, so no candidate is simulated.
    tight = job(2, rho=0.99, length=1800.0, slo=1.0)
    assert policy.place(book.groups, tight).kind is CandidateKind.NEW_GROUP
    assert runs == []
    # Without the screen the group is simulated, and still refused.
    unscreened = RollMuxPolicy(SPEC, screen=False)
    assert unscreened.place(book.groups, tight).kind is CandidateKind.NEW_GROUP
    assert runs


def test_all_members_keep_their_slo_in_the_plan():
    import numpy as np

    from roll_agentic.mux.round_robin import evaluate_round_robin, members_of

    rng = np.random.default_rng(3)
    jobs = [
        job(i, rho=rng.uniform(0.2, 0.8), length=rng.uniform(1200, 2400), slo=rng.uniform(1.0, 2.0))
        for i in range(40)
    ]
    book = place_all(RollMuxPolicy(SPEC), jobs)
    for g in book.groups.values():
        if len(g.members) < 2:
            continue
        periods = evaluate_round_robin(members_of(g, SPEC), switch_s=SPEC.warm_switch_s)
        for p, t in zip(g.members.values(), periods, strict=True):
            assert t <= p.slo * p.planned_iter_s


def test_share_any_opens_a_training_node_beside_a_shared_one():
    # A 1+1 job's group cannot host a 2-training-node job in the paper's kinds
    # (its one training node is not enough); with share_any the newcomer
    # shares the training node and opens a second.
    small = job(0, rho=0.3, length=1800.0, slo=2.0)
    big = job(1, rho=0.75, length=1800.0, slo=2.0, n_r=2, n_t=2)
    book = place_all(RollMuxPolicy(SPEC), [small])
    assert RollMuxPolicy(SPEC).place(book.groups, big).kind is CandidateKind.NEW_GROUP
    p = RollMuxPolicy(SPEC, share_any=True).place(book.groups, big)
    assert p.kind is CandidateKind.SHARE and p.new_train == 1 and len(p.train_nodes) == 1
    assert p.extra_cost_per_hour < big.solo_cost_per_hour(SPEC)
    group = book.groups[p.group_id]
    assert slo_ok(group, big, p, SPEC, headroom=SLO_HEADROOM) and memory_ok(group, big, p)


def test_plans_run_on_typical_phase_lengths():
    # Rollout typically ends at 80 % of its cap, training at 95 %. On worst
    # cases, A (1400 s rollout, 400 s training) and B (the mirror image)
    # share a training node at no cost to A: 1800 s of training per 1808 s
    # cycle. Typically, A's own iteration shrinks to 1508 s but the shared
    # node still trains 1710 s per cycle: A would run 1.13x slower, past
    # its 10 % SLO.
    from dataclasses import replace

    from roll_agentic.mux.round_robin import members_of

    typical = {"roll_typical": 0.8, "train_typical": 0.95}
    a = job(0, rho=1400 / 1800, length=1800.0, slo=1.1)
    b = job(1, rho=400 / 1800, length=1800.0, slo=2.0)
    for kw, feasible in (({}, True), (typical, False)):
        a2, b2 = replace(a, **kw), replace(b, **kw)
        book = GroupBook(SPEC)
        group, _ = book.apply(new_group_placement(b2, SPEC), b2)
        cand = Placement(
            CandidateKind.ADD_ROLLOUT,
            group.group_id,
            train_nodes=tuple(group.node_ids(Pool.TRAIN)),
            new_rollout=1,
        )
        assert slo_ok(group, a2, cand, SPEC, headroom=SLO_HEADROOM) is feasible
    (plan,) = members_of(group, SPEC)
    assert plan.times.roll_s == 0.8 * b.roll_s and plan.times.train_s == 0.95 * b.train_s
    assert b2.planned_iter_s == 0.8 * b.roll_s + b.sync_s + 0.95 * b.train_s


def test_a_free_pack_that_slows_its_group_loses_to_a_rollout_node():
    # Two rollout-heavy jobs on one rollout node queue behind each other
    # (1260 s + 1260 s of rollout per 1808 s cycle: 1.4x); with a rollout
    # node of its own, the newcomer only shares the training node, which
    # has room (540 + 540 s). The paper's rule takes the free pack; priced
    # by progress, the slowdown costs more than the 8 $/h node.
    a, b = job(0, rho=0.7, slo=2.0), job(1, rho=0.7, slo=2.0)
    book = place_all(RollMuxPolicy(SPEC), [a])
    (group,) = book.groups.values()
    paper = RollMuxPolicy(SPEC, rate_aware=False).place(book.groups, b)
    assert paper.kind is CandidateKind.PACK
    assert slo_ok(group, b, paper, SPEC, headroom=SLO_HEADROOM)  # feasible, only slow
    p = RollMuxPolicy(SPEC).place(book.groups, b)
    assert p.kind is CandidateKind.ADD_ROLLOUT and p.new_rollout == 1
    assert p.train_nodes == tuple(group.node_ids(Pool.TRAIN))


def test_the_rate_a_placement_measured_is_the_rate_of_the_group_it_forms():
    from roll_agentic.mux.group_view import view_of

    policy = RollMuxPolicy(SPEC)
    jobs = [job(0, rho=0.7, slo=1.6), job(1, rho=0.3, length=2000.0, slo=1.6), job(2, rho=0.5)]
    book = place_all(policy, jobs)
    policy.place(book.groups, job(3))  # refreshes the views of the groups formed
    for group in book.groups.values():
        assert policy._group_view(group).rate == view_of(group, SPEC).rate


def test_a_view_runs_its_group_for_the_rate_only_when_first_asked():
    from roll_agentic.mux.group_view import view_of
    from roll_agentic.mux.round_robin import evaluate_on
    from roll_agentic.mux.slo_check import progress_rate

    book = place_all(RollMuxPolicy(SPEC), [job(0, rho=0.7, slo=1.6), job(1, rho=0.3, slo=1.6)])
    (group,) = book.groups.values()
    view = view_of(group, SPEC)
    assert view.rate_if_known() is None  # most views serve screens that never read it
    expected = progress_rate(evaluate_on(view.plans, SPEC), list(group.members.values()), view.plans)
    assert view.rate == expected and view.rate_if_known() == expected
    assert view_of(group, SPEC, rate=0.5).rate == 0.5  # a rate measured by the placement's check


def test_a_joining_job_runs_its_rollouts_on_fewer_nodes_when_its_slo_allows():
    # A trains for 1,404 s of each 1,800: B's rollout, stretched from 2
    # nodes to A's one (700 s -> 1,400 s), runs while A trains.
    a = job(0, rho=0.22, length=1800.0)
    b = job(1, rho=0.7, length=1000.0, n_r=2)
    shrunk = place_all(RollMuxPolicy(SPEC), [a, b])
    (group,) = shrunk.groups.values()
    assert len(group.pinning["j1"].rollout_nodes) == 1
    assert tuple(group.node_ids(Pool.ROLLOUT)) == group.pinning["j0"].rollout_nodes
    assert GroupAssessor(SPEC, SLO_HEADROOM).assess(group)[0], "both keep their SLOs"
    full = place_all(RollMuxPolicy(FULL), [a, b])
    cost = lambda book: sum(g.cost_per_hour(SPEC) for g in book.groups.values())  # noqa: E731
    assert cost(shrunk) < cost(full)
    assert all(len(g.pinning["j1"].rollout_nodes) == 2 for g in full.groups.values() if "j1" in g.pinning)


def test_rollout_options_keep_only_node_counts_the_slo_allows():
    b = job(1, rho=0.7, length=1000.0, n_r=2)  # 1,400 s of rollout on one node: 1.7x its iteration
    assert [n for n, _ in rollout_options(b, SPEC, SLO_HEADROOM)] == [2, 1]
    assert [n for n, _ in rollout_options(b, FULL, SLO_HEADROOM)] == [2]
    tight = job(2, rho=0.7, length=1000.0, n_r=2, slo=1.3)
    assert [n for n, _ in rollout_options(tight, SPEC, SLO_HEADROOM)] == [2]
    (_, own), (_, one) = rollout_options(b, SPEC, SLO_HEADROOM)
    assert one.roll_s == pytest.approx(2 * own.roll_s) and one.train_s == own.train_s


def test_scale_train_lets_a_long_job_join_on_one_more_training_node():
    # B's 1,800 s iteration would set the pair's cycle past A's budget
    # (1.3 x 1,200 s less the headroom), so in the paper's kinds B goes
    # alone. On A's training node plus one more, B trains in 568 s instead
    # of 1,080 s and the pair fits: one training node fewer than apart.
    a = job(0, rho=0.5, length=1200.0, slo=1.3)
    b = job(1, rho=0.4, length=1800.0, slo=2.0)
    book = place_all(RollMuxPolicy(SPEC), [a])
    assert RollMuxPolicy(SPEC).place(book.groups, b).kind is CandidateKind.NEW_GROUP
    policy = RollMuxPolicy(SPEC, scale_train=1)
    p = policy.place(book.groups, b)
    assert p.kind is CandidateKind.SHARE and p.new_train == 1 and p.new_rollout == 0
    assert p.extra_cost_per_hour == SPEC.price(Pool.TRAIN) < b.solo_cost_per_hour(SPEC)
    group, _ = book.apply(p, b)
    assert group.pinning["j1"].train_nodes == (*group.pinning["j0"].train_nodes, 2)
    times = group.planned_times("j1", SPEC)
    assert times.train_s == pytest.approx(1080.0 / (1 + SPEC.scale_efficiency))
    assert GroupAssessor(SPEC, SLO_HEADROOM).assess(group)[0], "both keep their SLOs"
    assert policy.trim_offer(group, "j1") == ()  # its rollouts already share A's node


def test_scale_train_lets_a_job_with_an_slo_inside_the_headroom_share():
    # Alone on its own nodes such a job is the SLO reference: any partner
    # slows it past 1.03. Trained on more nodes it runs faster than alone.
    tight = job(0, rho=0.3, slo=1.03)
    assert RollMuxPolicy(SPEC).shares_nothing(tight)
    assert not RollMuxPolicy(SPEC, scale_train=1).shares_nothing(tight)
    options = RollMuxPolicy(SPEC, scale_train=2)._own_plan(tight)[1]
    trains = [opts[0][1].train_s for opts in options]
    assert len(options) == 3 and trains[0] > trains[1] > trains[2]


@pytest.mark.parametrize("share_any", [False, True])
def test_a_job_of_another_trainer_form_never_joins_a_group_and_greedy_and_optimal_agree(share_any):
    """Trainer forms (`JobProfile.form`: LoRA shape and base, or full): a switch between forms
    rebuilds the trainer from storage, which the SLO check does not price, so every policy
    keeps a job out of groups holding another form ("" is any form)."""
    from dataclasses import replace

    from roll_agentic.sim.baselines import GreedyPolicy
    from roll_agentic.sim.optimal import job_steps

    a = replace(job(0, rho=0.7), form="lora r=8 on base-1")
    book = place_all(RollMuxPolicy(SPEC), [a])
    policy = RollMuxPolicy(SPEC, share_any=share_any)
    mirror = job(1, rho=0.3)  # packs at zero cost beside a, of its form or of any
    for form, alone in (("full", True), ("lora r=8 on base-2", True), ("lora r=8 on base-1", False), ("", False)):
        b = replace(mirror, form=form)
        assert (policy.place(book.groups, b).kind is CandidateKind.NEW_GROUP) == alone, form
        assert (GreedyPolicy(SPEC).place(book.groups, b).kind is CandidateKind.NEW_GROUP) == alone, form
        assert all(s.group is None for s in job_steps(book, b, [1])) == alone, form
