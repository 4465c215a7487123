"""Trimming a member's rollout nodes once its group no longer needs them."""

from dataclasses import replace

import pytest

from roll_agentic.mux.batch import GroupAssessor
from roll_agentic.mux.candidates import new_group_placement, rollout_options
from roll_agentic.mux.group import CandidateKind, GroupBook, Placement
from roll_agentic.mux.group_view import view_of
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool
from roll_agentic.mux.trim import could_trim, own_rollout_nodes, trim_offer
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import TraceJob, WorkloadSpec, generate_trace

SPEC = ClusterSpec()


def prof(name, n_r, roll_s, train_s, slo=2.0):
    return JobProfile(name, "x", "small", n_r, 1, roll_s, train_s, 8.0, 2.0, 112.0, 14.0, slo)


def pair(slo_a=2.0):
    """A alone on 2 rollout nodes, then B packed onto A's training node and one of A's rollout nodes."""
    book = GroupBook(SPEC)
    a, b = prof("a", 2, 500.0, 500.0, slo_a), prof("b", 1, 500.0, 1000.0)
    group, _ = book.apply(new_group_placement(a, SPEC), a)
    rollout, train = group.node_ids(Pool.ROLLOUT), group.node_ids(Pool.TRAIN)
    book.apply(Placement(CandidateKind.PACK, group.group_id, (rollout[0],), tuple(train)), b)
    return book, group


def test_a_member_drops_the_rollout_node_only_it_uses_once_training_sets_the_pace():
    book, group = pair()
    policy = RollMuxPolicy(SPEC)
    before = policy._group_view(group)
    shared, own = group.pinning["a"].rollout_nodes
    assert policy.trim_offer(group, "a") == (shared,)  # keeps the node B shares, drops its own
    released = book.repin_rollout("a", (shared,))
    assert [n.node_id for n in released] == [own]
    assert group.pinning["a"].rollout_nodes == group.pinning["b"].rollout_nodes
    assert list(group.pinning) == ["a", "b"]  # same turn order
    assert GroupAssessor(SPEC, SLO_HEADROOM).assess(group)[0], "both keep their SLOs"
    after = policy._group_view(group)  # the pinning changed: the view is rebuilt
    assert after is not before and after.cost == pytest.approx(before.cost - SPEC.price(Pool.ROLLOUT))
    assert after.cost / after.rate < before.cost / before.rate
    assert policy.trim_offer(group, "a") == ()  # it shares its one node


def test_a_member_moves_its_rollouts_onto_a_partners_node_and_releases_its_own():
    # Training sets the pace (1,800 s a round); C rolls out for 300 s on a node of its own.
    book, group = pair()
    c = prof("c", 1, 300.0, 300.0, slo=4.0)
    book.apply(
        Placement(CandidateKind.ADD_ROLLOUT, group.group_id, (), tuple(group.node_ids(Pool.TRAIN)), 1), c
    )
    (c_node,) = group.pinning["c"].rollout_nodes
    policy = RollMuxPolicy(SPEC)
    keep = policy.trim_offer(group, "c")
    assert keep and c_node not in keep and set(keep) <= set(group.pinning["a"].rollout_nodes)
    assert [n.node_id for n in book.repin_rollout("c", keep)] == [c_node]
    assert all("c" in group.nodes[n].jobs for n in keep)
    assert GroupAssessor(SPEC, SLO_HEADROOM).assess(group)[0]


def test_no_trim_that_breaks_an_slo_or_slows_a_lone_job_for_nothing():
    book, group = pair(slo_a=1.3)  # A's rollout on one node: 1.5x its iteration
    assert RollMuxPolicy(SPEC).trim_offer(group, "a") == ()
    assert RollMuxPolicy(SPEC).trim_offer(group, "b") == ()  # its one node is shared
    assert RollMuxPolicy(replace(SPEC, rollout_shrink=False)).trim_offer(pair()[1], "a") == ()
    lone = GroupBook(SPEC)
    a = prof("a", 2, 500.0, 500.0)
    g, _ = lone.apply(new_group_placement(a, SPEC), a)
    # Alone, a slower rollout keeps the dear training node longer than the rollout node saves.
    assert RollMuxPolicy(SPEC).trim_offer(g, "a") == ()


def test_repin_rollout_rejects_nodes_a_member_cannot_run_on():
    book, group = pair()
    for bad in ((), (999,), tuple(group.node_ids(Pool.TRAIN))):
        with pytest.raises(ValueError, match="cannot run its rollouts"):
            book.repin_rollout("a", bad)


def test_a_simulated_trim_releases_the_node_and_keeps_every_slo():
    a, b = prof("a", 2, 500.0, 500.0), prof("b", 1, 500.0, 1000.0)
    jobs = [TraceJob(0.0, 60, seed=1, profile=a), TraceJob(5.0, 60, seed=2, profile=b)]
    trimmed = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(jobs)
    full_spec = replace(SPEC, rollout_shrink=False)
    full = ClusterSimulator(full_spec, RollMuxPolicy(full_spec)).run(jobs)
    assert trimmed.slo_attainment == full.slo_attainment == 1.0
    assert trimmed.total_cost < full.total_cost
    rollout = [x for x in trimmed.allocations if x.pool == "rollout"]
    assert len(rollout) == 2 and min(x.closed - x.opened for x in rollout) < 3 * 3600


def test_the_viewless_screen_skips_only_looks_that_find_no_trim():
    # Every member of the groups a 60-job trace holds at a few instants:
    # where `could_trim` says no, the full offer finds nothing either.
    spec = ClusterSpec(migration=True)
    trace = generate_trace(5, WorkloadSpec(n_jobs=60, span_days=4.0, h_min=12, h_max=48))
    screened = offered = found = 0
    for day in (1.0, 2.0, 3.0):
        sim = ClusterSimulator(spec, RollMuxPolicy(spec), horizon_s=day * 86400)
        sim.run(trace.jobs)
        for group in sim.groups.values():
            for job_id, job in group.members.items():
                own = own_rollout_nodes(group, job_id)
                if not own:
                    continue
                options = rollout_options(job, spec, SLO_HEADROOM)
                keep = trim_offer(
                    view_of(group, spec), group, job_id, own, options, spec, SLO_HEADROOM, 0.0
                )
                if could_trim(group, job_id, own, {n for n, _ in options}):
                    offered += 1
                    found += bool(keep)
                else:
                    screened += 1
                    assert keep == ()
    assert screened > 0 and offered > 0 and found > 0
