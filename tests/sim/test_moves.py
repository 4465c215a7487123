"""Moves of running jobs between their iterations (`sim/moves.py`)."""

from dataclasses import replace

from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.sim.baselines import GreedyPolicy, SoloPolicy
from roll_agentic.sim.cluster import ClusterSimulator
from roll_agentic.sim.trace import TraceJob
from tests.sim.test_cluster import SPEC, rh


def _lone_partners():
    """A and B share a training node; C (train-heavy) fits beside A alone, not beside both.

    A and B tolerate 20 %: beside both, C would load the training node past
    their cycle (540 + 540 + 1200 s > 1800 s) and slow them beyond it.
    """
    a = replace(rh(0, slo=1.2), n_iters=200)
    b = replace(rh(1, slo=1.2), n_iters=3)
    p = replace(rh(2).profile, kind="train_heavy", roll_s=600.0, train_s=1200.0)
    c = TraceJob(100.0, 200, seed=2, profile=p)
    return [a, b, c]


def test_a_job_left_alone_moves_into_a_group_with_room_and_it_pays_off():
    jobs = _lone_partners()
    stay = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, regroup=False)).run(jobs)
    move = ClusterSimulator(SPEC, RollMuxPolicy(SPEC)).run(jobs)  # regroups by default
    assert stay.moves == 0 and move.moves >= 1
    train_h = [
        sum(a.closed - a.opened for a in r.allocations if a.pool == "train") / 3600
        for r in (stay, move)
    ]
    assert train_h[1] < 0.7 * train_h[0]  # one training node for A and C, not two
    assert move.total_cost < stay.total_cost
    assert move.slo_attainment == 1.0


def test_a_lone_job_stays_when_its_slo_cannot_absorb_the_move():
    # C has 4 iterations and a 6 % SLO. When B leaves, A and C are each
    # alone and either could move beside the other. C's last iteration
    # could not absorb a move's cold starts and its wait for a turn
    # (`replan.move_keeps_slo`; it ran 7 % slow when it moved), so A moves.
    typical = {"roll_typical": 0.85, "train_typical": 0.925}  # as traces profile them
    a, b, c = (replace(j, profile=replace(j.profile, **typical)) for j in _lone_partners())
    c = replace(c, arrival_s=900.0, n_iters=4, profile=replace(c.profile, slo=1.06))
    moved = []
    sim = ClusterSimulator(SPEC, RollMuxPolicy(SPEC))
    regroup = sim._regroup

    def watched(rt, now):
        before = rt.group_id
        regroup(rt, now)
        if rt.group_id != before:
            moved.append(rt.trace.profile.job_id)

    sim._regroup = watched
    r = sim.run([a, b, c])
    assert moved == ["j0"]
    assert r.slo_attainment == 1.0


def test_a_move_pays_a_cold_start_on_each_phase_at_its_new_nodes():
    jobs = _lone_partners()
    cheap = ClusterSimulator(SPEC, RollMuxPolicy(SPEC, regroup=True)).run(jobs)
    dear_spec = replace(SPEC, cold_switch_s=5_000.0)
    dear = ClusterSimulator(dear_spec, RollMuxPolicy(dear_spec, regroup=True)).run(jobs)
    assert cheap.moves == dear.moves == 1
    ends = [max(o.end for o in r.jobs) for r in (cheap, dear)]
    # Queueing behind the partner absorbs part of it; at least one is paid.
    assert ends[1] - ends[0] >= 5_000.0 - SPEC.cold_switch_s


def test_baselines_never_move_jobs():
    jobs = _lone_partners()
    for policy in (SoloPolicy(SPEC), GreedyPolicy(SPEC)):
        assert ClusterSimulator(SPEC, policy).run(jobs).moves == 0


class _ScreensEveryEnd(ClusterSimulator):
    """Decides at every iteration end, as the simulator did before it kept a watch list."""

    def _screen(self, job_id: str) -> bool:
        super()._screen(job_id)
        return True


def test_iteration_ends_skipped_by_the_screen_had_nothing_to_decide():
    from roll_agentic.sim.trace import WorkloadSpec, generate_trace

    trace = generate_trace(5, WorkloadSpec(n_jobs=40, span_days=3.0, h_min=12, h_max=36))
    screened = []
    sim = ClusterSimulator(SPEC, RollMuxPolicy(SPEC))
    screen = sim._screen
    sim._screen = lambda job_id: screened.append(screen(job_id)) or screened[-1]
    watched = sim.run(trace.jobs)
    every = _ScreensEveryEnd(SPEC, RollMuxPolicy(SPEC)).run(trace.jobs)
    assert watched.moves == every.moves and watched.moves > 0
    assert watched.total_cost == every.total_cost
    assert [o.slowdown for o in watched.jobs] == [o.slowdown for o in every.jobs]
    assert 0 < sum(screened) < 0.5 * len(screened)  # most ends: one set lookup


def _looks_of(job_id, jobs):
    """The iteration ends at which `job_id` was looked at for a move, and the run."""
    looks = []
    sim = ClusterSimulator(SPEC, RollMuxPolicy(SPEC))
    regroup = sim._regroup

    def spy(rt, now):
        if rt.trace.profile.job_id == job_id:
            looks.append(rt.iters_done)
        regroup(rt, now)

    sim._regroup = spy
    return looks, sim.run(jobs)


def test_a_lone_job_looks_again_only_once_some_group_gained_room():
    # Alone for 30 iterations with nothing else running: its first look
    # finds no group to move to, and no group gains room after it.
    looks, alone = _looks_of("j0", [rh(0, n_iters=30)])
    assert alone.moves == 0 and looks == [1]
    # A job arriving at ~1/3 of its run, and leaving 5 iterations later,
    # gains a group room twice: j0 looks again after each, not at every end.
    late = rh(1, arrival=10 * 1800.0, n_iters=5)
    looks, _ = _looks_of("j0", [rh(0, n_iters=30), late])
    assert looks[0] == 1 and 1 < len(looks) <= 3


def test_members_that_may_move_rest_until_something_changed_with_the_same_moves():
    # With `rehome` any member may move; it is looked at only when its group
    # changed or (not content) some group gained room (`_rest`). Looking at
    # every iteration end must make the very same moves.
    from roll_agentic.mux.profile import ClusterSpec
    from roll_agentic.sim.trace import WorkloadSpec, generate_trace

    spec = ClusterSpec(rollout_fifo=True)
    trace = generate_trace(3, WorkloadSpec(n_jobs=40, span_days=3.0, h_min=12, h_max=36))
    screened = []
    sim = ClusterSimulator(spec, RollMuxPolicy(spec, rehome=True, share_any=True))
    screen = sim._screen
    sim._screen = lambda job_id: screened.append(screen(job_id)) or screened[-1]
    resting = sim.run(trace.jobs)
    every = _ScreensEveryEnd(spec, RollMuxPolicy(spec, rehome=True, share_any=True)).run(trace.jobs)
    assert resting.moves == every.moves and resting.moves > 0
    assert resting.total_cost == every.total_cost
    assert [o.slowdown for o in resting.jobs] == [o.slowdown for o in every.jobs]
    assert 0 < sum(screened) < 0.5 * len(screened)
