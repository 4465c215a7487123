"""The group book: nodes open on placement and close with their last job."""

from dataclasses import replace

from roll_agentic.mux.candidates import new_group_placement
from roll_agentic.mux.group import CandidateKind, GroupBook, Placement, is_saturated
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool

SPEC = ClusterSpec()


def job(i, rho=0.7):
    return JobProfile(
        f"j{i}", "balanced", "small", 1, 1, rho * 1000, (1 - rho) * 1000, 8.0, 2.0, 112.0, 14.0, 1.5
    )


def test_apply_and_remove_track_nodes_memory_and_cost():
    book = GroupBook(SPEC)
    a, b = job(0), job(1)
    group, opened = book.apply(new_group_placement(a, SPEC), a)
    assert [n.pool for n in opened] == [Pool.ROLLOUT, Pool.TRAIN]
    assert book.cost_per_hour() == SPEC.price(Pool.ROLLOUT) + SPEC.price(Pool.TRAIN)
    train = tuple(group.node_ids(Pool.TRAIN))
    _, opened_b = book.apply(
        Placement(CandidateKind.ADD_ROLLOUT, group.group_id, train_nodes=train, new_rollout=1), b
    )
    assert len(opened_b) == 1 and group.nodes[train[0]].mem_used_gb == 224.0
    released = book.remove("j0")
    assert [n.pool for n in released] == [Pool.ROLLOUT]  # the training node is still b's
    assert group.nodes[train[0]].mem_used_gb == 112.0
    released = book.remove("j1")
    assert {n.pool for n in released} == {Pool.ROLLOUT, Pool.TRAIN}
    assert book.groups == {} and book.cost_per_hour() == 0


def test_saturation_is_load_at_or_above_cycle():
    book = GroupBook(SPEC)
    a = job(0, rho=0.5)
    group, _ = book.apply(new_group_placement(a, SPEC), a)
    assert not is_saturated(group, SPEC)
    b = job(1, rho=0.5)
    nodes = dict(
        rollout_nodes=tuple(group.node_ids(Pool.ROLLOUT)),
        train_nodes=tuple(group.node_ids(Pool.TRAIN)),
    )
    book.apply(Placement(CandidateKind.PACK, group.group_id, **nodes), b)
    c = job(2, rho=0.5)
    book.apply(Placement(CandidateKind.PACK, group.group_id, **nodes), c)
    assert is_saturated(group, SPEC)  # three 500 s rollouts on one node > 1008 s cycle


def test_a_new_slo_target_changes_the_member_profile_only_and_invalidates_views():
    book = GroupBook(SPEC)
    a = job(0)
    group, _ = book.apply(new_group_placement(a, SPEC), a)
    pins, nodes, version = dict(group.pinning), dict(group.nodes), group.version
    profile = book.retarget_slo("j0", 1.8)
    assert profile.slo == 1.8 and group.members["j0"] is profile
    assert profile == replace(a, slo=1.8)
    assert group.pinning == pins and group.nodes == nodes
    assert group.version == version and group.targets == 1  # views refresh their SLO budget


def test_the_book_notes_which_groups_changed_only_when_asked_to():
    book = GroupBook(SPEC)
    a, b = job(0), job(1)
    group, _ = book.apply(new_group_placement(a, SPEC), a)
    assert book.touched is None  # not kept unless a caller wants it (the multiplexer does not)
    book.touched = set()
    other, _ = book.apply(new_group_placement(b, SPEC), b)
    assert book.touched == {other.group_id}
    book.touched.clear()
    book.remove("j0")
    assert book.touched == {group.group_id}
    book.touched.clear()
    book.retarget_slo("j1", 1.8)  # a target, not membership or pinning: views refresh their budget
    assert book.touched == set()
