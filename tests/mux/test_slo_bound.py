"""The SLO bound settles only candidates the round-robin run would refuse."""

import random

from roll_agentic.mux.profile import JobProfile, PhaseTimes
from roll_agentic.mux.round_robin import MemberPlan, evaluate_round_robin
from roll_agentic.mux.slo_bound import surely_misses_slo
from roll_agentic.mux.slo_check import slo_periods_ok

SWITCH_S = 1.9
HEADROOM = 0.05


def _random_group(rng: random.Random) -> tuple[list[MemberPlan], list[JobProfile]]:
    """2-6 members on a few shared rollout and training nodes (disjoint pools)."""
    plans, profiles = [], []
    n_roll, n_train = rng.randint(1, 4), rng.randint(1, 3)
    for i in range(rng.randint(2, 6)):
        roll, train = rng.uniform(200, 1500), rng.uniform(100, 900)
        times = PhaseTimes(roll, train, rng.uniform(2, 20), roll * rng.uniform(0.3, 1.0))
        rollout = tuple(sorted(rng.sample(range(n_roll), rng.randint(1, n_roll))))
        trains = tuple(sorted(rng.sample(range(100, 100 + n_train), rng.randint(1, n_train))))
        plans.append(MemberPlan(times, rollout, trains))
        # Its solo iteration at most its plan's (a plan may run on fewer nodes).
        solo = times.iter_s * rng.uniform(0.8, 1.0)
        profiles.append(
            JobProfile(f"j{i}", "balanced", "small", 1, 1, solo / 2, solo / 2, 0.0, 2.0,
                       10.0, 10.0, rng.uniform(1.0, 2.5))
        )
    return plans, profiles


def test_the_bound_never_refuses_a_group_the_run_accepts_and_settles_many_it_refuses():
    rng = random.Random(3)
    for fifo in (True, False):
        settled = refused = 0
        for _ in range(400):
            plans, profiles = _random_group(rng)
            periods = evaluate_round_robin(plans, switch_s=SWITCH_S, fifo_rollout=fifo)
            ok = slo_periods_ok(periods, profiles, HEADROOM)
            sure = surely_misses_slo(plans, profiles, HEADROOM, SWITCH_S, fifo)
            assert not (ok and sure), (plans, profiles)
            refused += not ok
            settled += sure
        assert refused > 50 and settled > refused // 3, (fifo, settled, refused)


def test_a_shared_training_node_binds_every_member_on_it_and_those_linked():
    # Two members share training node 10; a third, on its own training node,
    # shares a FIFO rollout node only, so it keeps its own pace.
    times = PhaseTimes(300.0, 700.0, 5.0)
    plans = [
        MemberPlan(times, (0,), (10,)),
        MemberPlan(times, (1,), (10,)),
        MemberPlan(PhaseTimes(300.0, 100.0, 5.0), (1,), (11,)),
    ]

    def profile(slo: float) -> JobProfile:
        return JobProfile("j", "balanced", "small", 1, 1, 300.0, 700.0, 5.0, 2.0, 1.0, 1.0, slo)

    # Node 10 takes 2 x (700 + 1.9) s a round: 1403.8 s against a solo 1005 s.
    tight = [profile(1.3), profile(2.0), profile(1.01)]
    assert surely_misses_slo(plans, tight, 0.05, SWITCH_S, fifo_rollout=True)
    loose = [profile(1.5), profile(1.5), profile(1.5)]
    assert not surely_misses_slo(plans, loose, 0.05, SWITCH_S, fifo_rollout=True)
