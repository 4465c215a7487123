"""Moving running jobs to a group where they cost less (`rehome`), beyond lone jobs."""

import random
from dataclasses import replace

from roll_agentic.mux.candidates import new_group_placement
from roll_agentic.mux.group import CandidateKind, GroupBook, Placement
from roll_agentic.mux.group_view import view_of
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, Pool
from roll_agentic.mux.rehome import member_adds, member_adds_at_most
from roll_agentic.mux.round_robin import evaluate_round_robin
from roll_agentic.mux.slo_check import progress_rate
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.compare import _instance

from .test_placement import job, place_all

SPEC = ClusterSpec()


def test_a_member_adds_its_groups_effective_cost_with_it_minus_without_it():
    policy = RollMuxPolicy(SPEC)
    book = place_all(policy, [job(0, rho=0.7, slo=1.6), job(1, rho=0.3, slo=1.6)])
    (group,) = book.groups.values()
    view = view_of(group, SPEC)
    n, cost = len(group.members), group.cost_per_hour(SPEC)
    for j in group.members:
        own = sum(SPEC.price(x.pool) for x in group.nodes.values() if x.jobs == [j])
        # The one left runs alone, at solo speed (rate 1).
        expected = cost * n / view.rate - (cost - own) * (n - 1) / 1.0
        assert member_adds(view, group, j, SPEC) == expected
    alone = GroupBook(SPEC)
    policy = RollMuxPolicy(SPEC)
    g, _ = alone.apply(policy.place(alone.groups, job(5)), job(5))
    assert member_adds(view_of(g, SPEC), g, "j5", SPEC) == g.cost_per_hour(SPEC)


def test_the_rate_without_a_member_comes_from_a_run_without_it():
    book = GroupBook(SPEC)
    jobs = [job(i, rho=0.5, slo=1.9) for i in range(3)]
    group, _ = book.apply(new_group_placement(jobs[0], SPEC), jobs[0])
    for j in jobs[1:]:  # all three on one rollout and one training node
        pack = Placement(
            CandidateKind.PACK,
            group.group_id,
            rollout_nodes=tuple(group.node_ids(Pool.ROLLOUT)),
            train_nodes=tuple(group.node_ids(Pool.TRAIN)),
        )
        book.apply(pack, j)
    view = view_of(group, SPEC)
    rest = [m for k, m in zip(view.members, view.plans, strict=True) if k != "j1"]
    rate = progress_rate(
        evaluate_round_robin(rest, switch_s=SPEC.warm_switch_s),
        [group.members["j0"], group.members["j2"]],
        rest,
    )
    cost = group.cost_per_hour(SPEC)  # no node is j1's alone
    assert member_adds(view, group, "j1", SPEC) == cost * 3 / view.rate - cost * 2 / rate


def test_the_bound_without_a_run_is_never_below_what_a_member_adds_and_exact_for_pairs():
    # Random groups as RollMux forms them, on FIFO rollout nodes and
    # sharing any nodes too (the setting where the bound is used most).
    rng = random.Random(7)
    for spec, share_any in ((SPEC, False), (ClusterSpec(rollout_fifo=True), True)):
        checked = 0
        for _ in range(40):
            policy = RollMuxPolicy(spec, share_any=share_any)
            book = GroupBook(spec)
            for i in range(rng.randint(2, 7)):
                rho, length = rng.uniform(0.2, 0.8), rng.uniform(900, 2400)
                j = job(i, rho=rho, length=length, slo=rng.uniform(1.2, 2.0))
                book.apply(policy.place(book.groups, j), j)
            for group in book.groups.values():
                view = view_of(group, spec)
                for member in group.members:
                    bound = member_adds_at_most(view, group, member, spec)
                    exact = member_adds(view_of(group, spec), group, member, spec)
                    assert bound >= exact - 1e-9
                    if len(group.members) <= 2:
                        assert bound == exact
                    checked += len(group.members) > 2
        assert checked > 20  # groups of three or more were formed


def test_a_group_found_no_better_is_not_searched_again_until_it_loses_a_member():
    policy = RollMuxPolicy(SPEC, rehome=True, move_margin=0.0)
    calls: list[int] = []
    best = policy.best

    def counted(groups, j, bound=None):
        calls.append(len(groups))
        return best(groups, j, bound)

    policy.best = counted
    # Two rollout-heavy jobs that slow each other, and a train-heavy one alone
    # whose SLO of 1.0 lets nobody slow it: j0 has nowhere better to go.
    book = place_all(policy, [job(0, rho=0.7, slo=1.9), job(1, rho=0.7, slo=1.9)])
    other = job(2, rho=0.3, length=1700.0, slo=1.0)
    book.apply(new_group_placement(other, SPEC), other)
    group = book.groups[book.job_group["j0"]]
    assert len(group.members) == 2
    calls.clear()
    first = policy.move_offer(book.groups, group, "j0")
    assert first.placement is None and not first.content  # it would move if it could
    assert calls == [1]  # searched the other group once
    assert policy.move_offer(book.groups, group, "j0").placement is None
    assert calls == [1]  # nothing changed: not searched again


def test_rehoming_lowers_cost_per_work_on_a_static_instance_and_keeps_slos():
    jobs = _instance(14, 8)  # jobs placed in arrival order pair badly here
    horizon = 40.0 * max(j.profile.solo_iter_s for j in jobs)
    runs = [  # one by one (no batch placement): the moves must repair the order
        ClusterSimulator(
            SPEC, RollMuxPolicy(SPEC, rehome=r, batch_budget=0), horizon_s=horizon
        ).run(jobs)
        for r in (False, True)
    ]
    per_work = [r.total_cost / sum(j.solo_s for j in r.jobs) for r in runs]
    assert runs[1].moves > runs[0].moves
    assert per_work[1] < 0.97 * per_work[0]
    assert runs[1].slo_attainment == 1.0


def test_rehome_is_off_by_default_and_baselines_have_no_move_offer():
    assert not RollMuxPolicy(SPEC).rehome
    jobs = [replace(j, n_iters=5) for j in _instance(3, 4)]
    r = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(jobs)
    assert r.slo_attainment == 1.0


def test_rates_known_without_a_run_are_the_runs_rates():
    # A newcomer's group ran at its old rate without it; a group a member
    # left runs at the rate `member_adds` found without that member. Both
    # are taken from what was already run: they must be what a run gives.
    rng = random.Random(11)
    spec = ClusterSpec(rollout_fifo=True)
    joined = left = 0
    for _ in range(30):
        policy = RollMuxPolicy(spec, share_any=True)
        book = GroupBook(spec)
        for i in range(rng.randint(2, 6)):
            j = job(i, rho=rng.uniform(0.2, 0.8), length=rng.uniform(900, 2400), slo=rng.uniform(1.3, 2.0))
            group, _ = book.apply(policy.place(book.groups, j), j)
            view = policy._group_view(group)
            if j.job_id in view.rates_without:
                fresh = view_of(group, spec)
                assert member_adds(view, group, j.job_id, spec) == member_adds(fresh, group, j.job_id, spec)
                joined += 1
        for group in list(book.groups.values()):
            if len(group.members) < 3:
                continue
            leaving = next(iter(group.members))
            member_adds(policy._group_view(group), group, leaving, spec)
            book.remove(leaving)
            assert policy._group_view(group).rate_if_known() == view_of(group, spec).rate
            left += 1
    assert joined > 10 and left > 5
