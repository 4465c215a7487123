"""Batch placement of jobs that arrive together: better plans, real ids, every check kept."""

from dataclasses import replace

from roll_agentic.mux.batch import GroupAssessor, apply_batch, signature
from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import TraceJob, WorkloadSpec, generate_trace

SPEC = ClusterSpec()


def prof(i, rho, length=1800.0, slo=1.5):
    return JobProfile(
        f"j{i}", "x", "small", 1, 1, rho * length, (1 - rho) * length, 8.0, 2.0, 112.0, 14.0, slo
    )


def objective(book):
    return GroupAssessor(SPEC, SLO_HEADROOM).objective(book.groups.values())


def one_by_one(jobs):
    book, policy = GroupBook(SPEC), RollMuxPolicy(SPEC)
    for j in jobs:
        book.apply(policy.place(book.groups, j), j)
    return book


def as_batch(jobs, book=None):
    book = book or GroupBook(SPEC)
    apply_batch(book, RollMuxPolicy(SPEC).place_batch(book.groups, jobs))
    return book


def test_a_batch_pairs_complementary_jobs_that_arrival_order_splits():
    # Two rollout-heavy jobs first: one by one, the second joins the first
    # (the only group), and the train-heavy pair that follows pairs up too.
    jobs = [prof(0, 0.72), prof(1, 0.70), prof(2, 0.30), prof(3, 0.28)]
    online, batch = one_by_one(jobs), as_batch(jobs)
    assert objective(batch) < objective(online) / 1.05
    for g in batch.groups.values():  # each group mixes a rollout-heavy and a train-heavy job
        assert sorted(j.roll_s > j.train_s for j in g.members.values()) == [False, True]


def test_batch_plans_are_never_worse_and_keep_every_check():
    assessor = GroupAssessor(SPEC, SLO_HEADROOM)
    for seed in range(6):
        jobs = [j.profile for j in generate_trace(seed, WorkloadSpec(n_jobs=6)).jobs]
        batch = as_batch(jobs)
        assert objective(batch) <= objective(one_by_one(jobs)) + 1e-9
        assert sorted(batch.job_group) == sorted(j.job_id for j in jobs)
        for g in batch.groups.values():
            assert assessor.assess(g)[0], "every group keeps its members' SLOs"
            assert all(n.mem_used_gb <= n.mem_capacity_gb + 1e-9 for n in g.nodes.values())
            for pin, job in zip(g.pinning.values(), g.members.values(), strict=True):
                # its own training nodes; its own rollout nodes or fewer (`rollout_shrink`)
                assert len(pin.train_nodes) == job.n_train
                assert 1 <= len(pin.rollout_nodes) <= job.n_rollout


def test_a_plan_lands_on_the_real_books_ids():
    # The real book has handed out ids that a scratch copy cannot know of
    # (a group and its nodes opened and released): the plan's new groups
    # and nodes must be mapped, and the plan's shape kept.
    book = GroupBook(SPEC)
    book.apply(RollMuxPolicy(SPEC).place(book.groups, prof(9, 0.5, slo=1.0)), prof(9, 0.5, slo=1.0))
    book.apply(RollMuxPolicy(SPEC).place(book.groups, prof(8, 0.4)), prof(8, 0.4))
    book.remove("j9")
    jobs = [prof(0, 0.72), prof(1, 0.70), prof(2, 0.30), prof(3, 0.28)]
    steps = RollMuxPolicy(SPEC).place_batch(book.groups, jobs)
    scratch = GroupBook.scratch(book.groups, SPEC)
    apply_batch(scratch, steps)
    apply_batch(book, steps)
    shape = lambda b: sorted(signature(g) for g in b.groups.values())  # noqa: E731
    assert shape(book) == shape(scratch)
    ids = [n for g in book.groups.values() for n in g.nodes]
    assert len(ids) == len(set(ids))


def test_a_batch_of_one_is_the_online_placement():
    book = as_batch([prof(8, 0.4)])
    job = prof(0, 0.7)
    steps = RollMuxPolicy(SPEC).place_batch(book.groups, [job])
    assert [s.placement for s in steps] == [RollMuxPolicy(SPEC).place(book.groups, job)]


def test_the_simulator_places_simultaneous_arrivals_as_one_batch():
    jobs = [prof(0, 0.72), prof(1, 0.70), prof(2, 0.30), prof(3, 0.28)]
    trace = [TraceJob(0.0, 30, seed=i, profile=p) for i, p in enumerate(jobs)]
    res = {
        b: ClusterSimulator(SPEC, RollMuxPolicy(SPEC, batch_budget=b)).run(trace) for b in (0, 3200)
    }
    cost_per_work = {b: r.total_cost / sum(j.solo_s for j in r.jobs) for b, r in res.items()}
    assert cost_per_work[3200] < cost_per_work[0]
    assert res[3200].slo_attainment == 1.0


def test_a_sweep_arriving_into_a_running_cluster_keeps_every_slo():
    from dataclasses import replace

    jobs = generate_trace(3, WorkloadSpec(n_jobs=30, span_days=2.0, h_min=6.0, h_max=12.0)).jobs
    sweep_at = jobs[10].arrival_s
    jobs = [replace(j, arrival_s=sweep_at) if 10 <= i < 16 else j for i, j in enumerate(jobs)]
    jobs.sort(key=lambda j: j.arrival_s)
    res = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(jobs)
    assert len(res.jobs) == 30 and all(j.iters_done == j.n_iters for j in res.jobs)
    assert res.slo_attainment == 1.0


def test_a_batch_may_open_a_group_on_fewer_rollout_nodes_that_its_partner_fills():
    # Two train-heavy jobs profiled on 2 rollout nodes each: together they
    # keep one training node busy, and both rollouts fit on one rollout
    # node within their SLOs. Online, the first job opens its own 2 nodes.
    a, b = (replace(prof(i, 0.2, length=2000.0, slo=2.0), n_rollout=2) for i in (0, 1))
    online, batch = one_by_one([a, b]), as_batch([a, b])
    rollout_nodes = lambda book: sum(len(g.node_ids(Pool.ROLLOUT)) for g in book.groups.values())  # noqa: E731
    assert (rollout_nodes(online), rollout_nodes(batch)) == (2, 1)
    assert objective(batch) < objective(online)
    assert all(GroupAssessor(SPEC, SLO_HEADROOM).assess(g)[0] for g in batch.groups.values())
