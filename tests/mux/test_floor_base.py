"""A group's candidates' SLO bounds, the members' part kept: the same floats as from scratch."""

import random

from roll_agentic.mux.floor_base import FloorBase
from roll_agentic.mux.round_robin import MemberPlan
from roll_agentic.mux.slo_bound import feasible_floors
from tests.mux.test_slo_bound import HEADROOM, SWITCH_S, _random_group


def test_the_kept_part_gives_what_the_bound_from_scratch_gives():
    # `RollMuxPolicy.best` weighs a group's candidates on one `FloorBase`
    # per group view; every floor (or refusal) must match, to the last bit.
    rng = random.Random(7)
    refused = kept = 0
    for _ in range(600):
        plans, profiles = _random_group(rng)
        *members, newcomer = plans
        *old, job = profiles
        base = FloorBase.of(members, old, HEADROOM, SWITCH_S)
        assert base.matches(members, old)
        # The newcomer as placement builds it: some of the group's nodes
        # and fresh ones (ids past every node's), or, rarely, a node of
        # the other pool, which goes the full way.
        fresh = 1000
        roll = newcomer.rollout_nodes[: rng.randint(0, len(newcomer.rollout_nodes))]
        train = newcomer.train_nodes[: rng.randint(0, len(newcomer.train_nodes))]
        roll += tuple(range(fresh, fresh + rng.randint(0 if roll else 1, 2)))
        train += tuple(range(fresh + 10, fresh + 10 + rng.randint(0 if train else 1, 2)))
        if rng.random() < 0.05:
            train += members[0].rollout_nodes[:1]
        plan = MemberPlan(newcomer.times, roll, train)
        got = base.feasible_floors(plan, job)
        want = feasible_floors([*members, plan], [*old, job], HEADROOM, SWITCH_S, True)
        assert got == want, (members, plan)
        refused += want is None
        kept += want is not None
    assert refused > 50 and kept > 50, (refused, kept)
