"""Routing without Ray: pools by task, phase-aware cost choice, stickiness, fallback."""

import logging

import pytest

from roll_agentic.config import Config, HardwareClassConfig, PoolConfig, RouterConfig, TaskConfig
from roll_agentic.engine.cost_model import CostModel, HardwareClass, RequestMix
from roll_agentic.engine.router import EngineSlot, Router, RoutingTable, router_kwargs

# Compute-rich: fast prefill, dear. Bandwidth-rich: slow prefill, cheap decode.
H800 = HardwareClass(prefill_tokens_per_s=20000, decode_tokens_per_s=400, price_per_hour=4.0)
H20 = HardwareClass(prefill_tokens_per_s=4000, decode_tokens_per_s=500, price_per_hour=1.5)


def _table(policy="affinity", task_pools=None, prior=None) -> RoutingTable:
    engines = [EngineSlot(0, "default", "H20"), EngineSlot(1, "default", "H20"), EngineSlot(2, "fast", "H800")]
    return RoutingTable(engines, task_pools if task_pools is not None else {"lake": "fast"}, policy=policy,
                        cost_model=CostModel({"H800": H800, "H20": H20}), decode_prior=prior or {})


def test_cost_is_price_times_busy_seconds():
    assert H800.cost(20000, 0) == pytest.approx(4.0 / 3600)
    assert H20.cost(4000, 500) == pytest.approx(1.5 / 3600 * 2)
    model = CostModel({"H800": H800, "H20": H20})
    assert model.cost("unknown", RequestMix(1, 1)) is None
    # the mix, not the size, decides: prefill-heavy -> H800, decode-heavy -> H20
    assert model.cheapest({"a": "H20", "b": "H800"}, RequestMix(5000, 10))[0] == "b"
    assert model.cheapest({"a": "H20", "b": "H800"}, RequestMix(50, 500))[0] == "a"
    r = model.break_even_ratio("H800", "H20")
    assert model.cost("H800", RequestMix(r, 1)) == pytest.approx(model.cost("H20", RequestMix(r, 1)))


def test_affinity_follows_the_task_map_and_the_default_pool_takes_the_rest():
    t = _table()
    assert t.engines[t.assign("lake", "a")].pool == "fast"
    assert t.engines[t.assign("math", "b")].pool == "default"
    assert t.routed == {"lake": {"fast": 1}, "math": {"default": 1}}
    assert t.fallbacks == 0


def test_least_loaded_inside_a_pool_and_sticky_per_trajectory():
    t = _table()
    first, second = t.assign("math", "a"), t.assign("math", "b")
    assert {first, second} == {0, 1}  # spread over the pool's two engines
    assert t.assign("math", "a", prompt_tokens=300) == first  # every later turn: same engine
    t.release("a")
    assert t.assign("math", "c") == first  # the freed engine is the least loaded again


def test_a_pool_without_live_engines_falls_back_to_the_default_pool_and_counts_it(caplog):
    t = _table()
    t.assign("lake", "a")
    t.mark_dead(2)
    with caplog.at_level(logging.WARNING):
        moved = t.assign("lake", "a")  # its engine died: re-routed, not stuck
        again = t.assign("lake", "b")
    assert t.engines[moved].pool == "default" and t.engines[again].pool == "default"
    assert t.fallbacks == 2 and t.fallbacks_by_pool == {"fast": 2}
    assert sum("no live engine" in r.message for r in caplog.records) == 1  # warned once per pool
    for i in (0, 1):
        t.mark_dead(i)
    with pytest.raises(RuntimeError, match="no live rollout engine"):
        t.assign("math", "c")  # an error the worker counts and retries, never a hang


def test_phase_aware_sends_prefill_heavy_requests_to_compute_rich_and_decode_heavy_to_cheap_decode():
    t = _table("phase_aware", task_pools={}, prior={"lake": 4, "essay": 512})
    lake = t.assign("lake", "a", prompt_tokens=6000)  # long growing context, short moves
    essay = t.assign("essay", "b", prompt_tokens=40)  # short question, long answer
    assert t.engines[lake].hardware == "H800"
    assert t.engines[essay].hardware == "H20"
    d = t.snapshot()["decisions"]["lake"]
    assert d["pool"] == "fast" and d["prefill_tokens"] == 6000 and d["cost_usd"]["fast"] < d["cost_usd"]["default"]


def test_phase_aware_counts_only_context_the_engine_does_not_hold():
    t = _table("phase_aware", task_pools={}, prior={"lake": 4})
    t.assign("lake", "a", prompt_tokens=6000)
    assert t.estimate("lake", "a", 6100).prefill_tokens == 100  # the prefix is cached on its engine
    assert t.estimate("lake", "new", 6100).prefill_tokens == 6100
    t.mark_dead(t.sticky["a"])
    assert t.estimate("lake", "a", 6100).prefill_tokens == 6100  # its cache died with the engine


def test_decode_estimate_is_a_running_average_of_what_the_engines_served():
    t = _table("phase_aware", task_pools={}, prior={"chat": 4})
    assert t.estimate("chat", "x", 100).decode_tokens == 4  # the prior, before anything is served
    t.observe([{"per_task": {"chat": {"requests": 10, "decode_tokens": 5000}}},
               {"per_task": {"chat": {"requests": 10, "decode_tokens": 5000}}}])
    assert t.estimate("chat", "x", 100).decode_tokens == 500
    # the same cumulative totals again: no new requests, no change
    t.observe([{"per_task": {"chat": {"requests": 20, "decode_tokens": 10000}}}])
    assert t.estimate("chat", "x", 100).decode_tokens == 500
    t.observe([{"per_task": {"chat": {"requests": 30, "decode_tokens": 10100}}}])  # replies got short
    assert 10 < t.estimate("chat", "x", 100).decode_tokens < 500
    # having learnt long replies, a short prompt now goes to the cheap-decode class
    t2 = _table("phase_aware", task_pools={}, prior={"chat": 1})
    assert t2.engines[t2.assign("chat", "p", 4000)].hardware == "H800"
    t2.observe([{"per_task": {"chat": {"requests": 1, "decode_tokens": 2000}}}])
    assert t2.engines[t2.assign("chat", "q", 4000)].hardware == "H20"


def test_phase_aware_ties_and_unknown_classes_keep_the_task_map():
    engines = [EngineSlot(0, "default", "A"), EngineSlot(1, "own", "A"), EngineSlot(2, "odd", "mystery")]
    same = HardwareClass(1000, 100, 1.0)
    t = RoutingTable(engines, {"x": "own"}, policy="phase_aware", cost_model=CostModel({"A": same}))
    assert t.engines[t.assign("x", "a", 100)].pool == "own"  # equal cost: its own pool wins
    t = RoutingTable(engines, {"x": "odd"}, policy="phase_aware", cost_model=CostModel({}))
    assert t.engines[t.assign("x", "a", 100)].pool == "odd"  # nothing to compare: the map


def test_router_is_built_from_the_config():
    cfg = Config(tasks=[TaskConfig(name="lake", env_id="e:E", pool="fast", max_new_tokens=4),
                        TaskConfig(name="essay", env_id="e:E", max_new_tokens=600)],
                 pools=[PoolConfig("default", "H20", 2), PoolConfig("fast", "H800", 1)],
                 router=RouterConfig("phase_aware", {"H800": HardwareClassConfig(20000, 400, 4.0),
                                                     "H20": HardwareClassConfig(4000, 500, 1.5)}))
    kwargs = router_kwargs(cfg)
    assert kwargs["engines"] == [("default", "H20"), ("default", "H20"), ("fast", "H800")]
    router = Router(**kwargs)
    assert router.table.engines[router.assign("essay", "e", 30)].pool == "default"
    assert router.table.engines[router.assign("lake", "l", 5000)].pool == "fast"
    assert router.snapshot()["policy"] == "phase_aware"
    with pytest.raises(ValueError, match="router policy"):
        RoutingTable([], {}, policy="random")


def test_phase_aware_costs_only_pools_that_can_serve():
    """The cheapest pool dead: before, it was still chosen, and the request fell back to the
    default pool though the task's own pool was alive (a fallback counted, a decision misnamed)."""
    a10 = HardwareClass(prefill_tokens_per_s=3000, decode_tokens_per_s=300, price_per_hour=3.0)
    engines = [EngineSlot(0, "default", "A10"), EngineSlot(1, "fast", "H800"), EngineSlot(2, "mid", "H20")]
    t = RoutingTable(engines, {"lake": "mid"}, policy="phase_aware",
                     cost_model=CostModel({"H800": H800, "H20": H20, "A10": a10}), decode_prior={"lake": 4})
    assert t.engines[t.assign("lake", "a", prompt_tokens=6000)].pool == "fast"  # prefill-heavy: H800
    t.mark_dead(1)
    chosen = t.assign("lake", "b", prompt_tokens=6000)
    assert t.engines[chosen].pool == "mid" and t.decisions["lake"]["pool"] == "mid"
    assert t.fallbacks == 0
