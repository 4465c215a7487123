"""The router after an engine is marked dead, after its workers are rebuilt, and after an engine restarts."""

import pytest

from roll_agentic.engine.router import EngineSlot, Router, RoutingTable


def _two() -> RoutingTable:
    return RoutingTable([EngineSlot(0, "default", "H20"), EngineSlot(1, "default", "H20")], {})


def test_a_dead_mark_keeps_the_load_of_the_trajectories_still_running_there():
    """mark_dead zeroed the engine's active count and dropped its sticky entries: after
    mark_alive it looked idle while still serving them, and took every new trajectory."""
    t = _two()
    placed = {traj: t.assign("math", traj) for traj in ("t1", "t2", "t3", "t4")}
    assert sorted(placed.values()) == [0, 0, 1, 1]
    t.mark_dead(0)  # an EngineTimeout on a live engine: its trajectories keep running
    t.mark_alive(0)
    assert [e.active for e in t.engines] == [2, 2]
    assert {t.assign("math", "t5"), t.assign("math", "t6")} == {0, 1}
    for traj in ("t1", "t2", "t3", "t4"):  # their own releases free their slots
        t.release(traj)
    assert [e.active for e in t.engines] == [1, 1]


def test_a_trajectory_whose_engine_died_moves_and_frees_its_old_slot():
    t = _two()
    first = t.assign("math", "a", prompt_tokens=100)
    t.assign("math", "b")
    t.mark_dead(first)
    assert t.context.get("a") is None  # its cache died with the engine
    moved = t.assign("math", "a", prompt_tokens=120)
    assert moved != first and t.sticky["a"] == moved
    assert t.engines[first].active == 0 and t.engines[moved].active == 2
    t.release("a")
    assert t.engines[moved].active == 1 and t.engines[first].active == 0


def test_reset_makes_every_engine_routable_and_forgets_every_trajectory():
    router = Router([("default", "H20"), ("default", "H20"), ("fast", "H800")], {"lake": "fast"})
    for traj in ("a", "b", "c"):
        router.assign("math", traj, 50)
    router.assign("lake", "l", 50)
    router.mark_dead(0)
    router.mark_dead(2)
    assert router.assign("lake", "x") == 1  # its pool is dead: a fallback
    router.reset()
    t = router.table
    assert all(e.alive and e.active == 0 for e in t.engines)
    assert t.sticky == {} and t.context == {}
    assert t.engines[router.assign("lake", "l2")].pool == "fast"  # routable again, no fallback counted
    assert t.fallbacks == 1  # the one counted before the reset stays in the totals
    assert [e.assigned_total for e in t.engines] == [2, 2, 2]  # lifetime counts are kept


def test_a_restarted_engine_counters_begin_again_without_skewing_the_decode_average():
    """Lifetime counters summed over engines, then diffed: a restart's lost history made the
    window's sample 6900 tokens a reply where ~100 were served."""
    t = RoutingTable([EngineSlot(0, "default", "H20"), EngineSlot(1, "default", "H20")], {}, decode_prior={"chat": 4})
    t.observe([{"per_task": {"chat": {"requests": 1000, "decode_tokens": 32000}}},
               {"per_task": {"chat": {"requests": 1000, "decode_tokens": 32000}}}])
    assert t.demand["chat"].decode_per_request == pytest.approx(32)
    t.observe([{"per_task": {"chat": {"requests": 10, "decode_tokens": 1000}}},  # engine 0 restarted
               {"per_task": {"chat": {"requests": 2000, "decode_tokens": 132000}}}])
    # the window served 1010 requests, 101000 tokens: a sample of 100, averaged in
    assert t.demand["chat"].decode_per_request == pytest.approx(0.7 * 32 + 0.3 * 100)
    # an engine that did not answer (its stats missing) loses nothing; back, it is diffed as before
    t.observe([{"per_task": {}}, {"per_task": {"chat": {"requests": 2000, "decode_tokens": 132000}}}])
    before = t.demand["chat"].decode_per_request
    assert before == pytest.approx(0.7 * 32 + 0.3 * 100)
    t.observe([{"per_task": {"chat": {"requests": 20, "decode_tokens": 2000}}},
               {"per_task": {"chat": {"requests": 2000, "decode_tokens": 132000}}}])
    assert t.demand["chat"].decode_per_request == pytest.approx(0.7 * before + 0.3 * 100)
