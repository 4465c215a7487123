"""Trimming a member's rollout nodes once its group no longer needs them."""

from dataclasses import replace

import pytest

from roll_agentic.mux.batch import GroupAssessor
from roll_agentic.mux.candidates import new_group_placement
from roll_agentic.mux.group import CandidateKind, GroupBook, Placement
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import TraceJob

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
    drop = policy.trim_offer(group, "a")
    assert drop == (group.pinning["a"].rollout_nodes[1],)  # its own node, not the one B shares
    released = book.drop_rollout("a", drop)
    assert [n.node_id for n in released] == list(drop)
    assert group.pinning["a"].rollout_nodes == group.pinning["b"].rollout_nodes
    assert list(group.pinning) == ["a", "b"]  # same turn order
    assert GroupAssessor(SPEC, SLO_HEADROOM).assess(group)[0], "both keep their SLOs"
    after = policy._group_view(group)  # the pinning changed: the view is rebuilt
    assert after is not before and after.cost == pytest.approx(before.cost - SPEC.price(Pool.ROLLOUT))
    assert after.cost / after.rate < before.cost / before.rate
    assert policy.trim_offer(group, "a") == ()  # one rollout node left


def test_no_trim_that_breaks_an_slo_shares_a_node_or_slows_a_lone_job():
    book, group = pair(slo_a=1.3)  # A's rollout on one node: 1.5x its iteration
    assert RollMuxPolicy(SPEC).trim_offer(group, "a") == ()
    assert RollMuxPolicy(SPEC).trim_offer(group, "b") == ()  # one node, shared
    assert RollMuxPolicy(replace(SPEC, rollout_shrink=False)).trim_offer(pair()[1], "a") == ()
    lone = GroupBook(SPEC)
    a = prof("a", 2, 500.0, 500.0)
    g, _ = lone.apply(new_group_placement(a, SPEC), a)
    # Alone, a slower rollout keeps the dear training node longer than the rollout node saves.
    assert RollMuxPolicy(SPEC).trim_offer(g, "a") == ()


def test_drop_rollout_rejects_what_would_leave_no_rollout_node():
    book, group = pair()
    with pytest.raises(ValueError, match="cannot drop"):
        book.drop_rollout("a", group.pinning["a"].rollout_nodes)
    with pytest.raises(ValueError, match="cannot drop"):
        book.drop_rollout("a", (999,))


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
