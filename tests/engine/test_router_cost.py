"""Phase-aware routing prices a pool's time at the pool's own price_per_hour.

Before, pools[].price_per_hour reached only the step metrics' bill
(train/step_metrics.py); the router costed every pool at its hardware class's
router.hardware price, 1.0 by default. A run pricing its pools (the README's
H20 at 1.85, H800 at 5.28) and not its classes was routed by expected time
alone: every mix went to the fast, dear pool. Without pool prices (all 0.0,
the default) nothing changes.
"""

import logging

import pytest

from roll_agentic.config import Config, HardwareClassConfig, PoolConfig, RouterConfig, TaskConfig
from roll_agentic.engine.cost_model import CostModel, HardwareClass, RequestMix
from roll_agentic.engine.router import EngineSlot, Router, RoutingTable, router_kwargs

# Speeds of the two classes, prices left at the config's default (1.0 each): time decides alone.
CLASSES = {"H800": HardwareClassConfig(20000, 400), "H20": HardwareClassConfig(4000, 500)}


def _cfg(default_price: float, fast_price: float) -> Config:
    return Config(tasks=[TaskConfig(name="chat", env_id="e:E", max_new_tokens=32),
                         TaskConfig(name="lake", env_id="e:E", max_new_tokens=4)],
                  pools=[PoolConfig("default", "H20", 2, price_per_hour=default_price),
                         PoolConfig("fast", "H800", 1, price_per_hour=fast_price)],
                  router=RouterConfig("phase_aware", dict(CLASSES)))


def test_pool_prices_reach_the_router_and_decide_by_cost_not_time():
    router = Router(**router_kwargs(_cfg(1.85, 5.28)))
    # 1000 prefill + 32 decode tokens: 0.13 s on H800, 0.31 s on H20; at the pools' prices
    # $0.69 vs $0.58 per engine-hour-second: the slower pool is the cheaper one.
    chosen = router.assign("chat", "a", 1000)
    assert router.table.engines[chosen].pool == "default"
    d = router.snapshot()["decisions"]["chat"]
    assert d["cost_usd"]["fast"] == pytest.approx(5.28 / 3600 * (1000 / 20000 + 32 / 400))
    assert d["cost_usd"]["default"] == pytest.approx(1.85 / 3600 * (1000 / 4000 + 32 / 500))
    # Hardware affinity stands: a prefill-heavy turn is cheaper on compute-rich engines even at 2.85x.
    assert router.table.engines[router.assign("lake", "b", 6000)].pool == "fast"


def test_without_pool_prices_routing_is_unchanged():
    kwargs = router_kwargs(_cfg(0.0, 0.0))  # the default: no price given
    assert kwargs["prices"] == {"default": 0.0, "fast": 0.0}
    priced_by_class = Router(**{k: v for k, v in kwargs.items() if k != "prices"})
    unpriced = Router(**kwargs)
    for n, (task, tokens) in enumerate([("chat", 1000), ("chat", 30), ("lake", 6000), ("lake", 200)]):
        a, b = priced_by_class.assign(task, f"t{n}", tokens), unpriced.assign(task, f"t{n}", tokens)
        assert a == b
        assert priced_by_class.snapshot()["decisions"] == unpriced.snapshot()["decisions"]
    assert unpriced.table.engines[unpriced.assign("chat", "x", 1000)].pool == "fast"  # by time: equal prices


def test_a_cheaper_pool_of_the_same_class_wins_and_ties_still_keep_the_task_map():
    engines = [EngineSlot(0, "default", "H20"), EngineSlot(1, "spot", "H20")]
    model = CostModel({"H20": HardwareClass(4000, 500, 1.0)})
    t = RoutingTable(engines, {}, policy="phase_aware", cost_model=model, pool_prices={"default": 1.85, "spot": 0.6})
    assert t.engines[t.assign("x", "a", 100)].pool == "spot"
    t = RoutingTable(engines, {}, policy="phase_aware", cost_model=model, pool_prices={"default": 1.0, "spot": 1.0})
    assert t.engines[t.assign("x", "a", 100)].pool == "default"  # equal: the task's own (default) pool
    t = RoutingTable(engines, {}, policy="affinity", cost_model=model, pool_prices={"spot": 0.6})
    assert t.engines[t.assign("x", "a", 100)].pool == "default"  # affinity follows the map, prices or not


def test_the_cost_model_takes_a_pools_price_in_place_of_its_classs():
    model = CostModel({"A": HardwareClass(1000, 100, 2.0)})
    mix = RequestMix(1000, 100)  # 2 s
    assert model.cost("A", mix) == pytest.approx(2.0 / 3600 * 2)
    assert model.cost("A", mix, 0.0) == pytest.approx(2.0 / 3600 * 2)  # 0: not given, never free
    assert model.cost("A", mix, 9.0) == pytest.approx(9.0 / 3600 * 2)
    best, costs = model.cheapest({"p": "A", "q": "A"}, mix, {"p": 3.0, "q": 0.0})
    assert best == "q" and costs["p"] == pytest.approx(3.0 / 3600 * 2)


def test_bad_or_partial_prices_are_refused_or_said(caplog):
    engines = [EngineSlot(0, "default", "H20"), EngineSlot(1, "fast", "H800")]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="pool prices"):
            RoutingTable(engines, {}, policy="phase_aware", pool_prices={"fast": bad})
    with caplog.at_level(logging.WARNING, logger="roll_agentic.engine.router"):
        RoutingTable(engines, {}, policy="phase_aware", pool_prices={"fast": 5.28})
    assert any("['fast'] have a price_per_hour and ['default'] do not" in r.message for r in caplog.records)
