"""The SLO check's arithmetic: planned periods against each member's SLO.

Placement, batches, trims and moves all ask the same two questions of a
candidate group's planned periods (`round_robin.evaluate_on`): does every
member keep its SLO, with headroom kept back for what plans cannot see
(`slo_periods_ok`, `lone_slo_ok`), and how much progress does the group
make (`progress_rate`), a lone member counted at its plan's speed
(`lone_rate`).
"""

from __future__ import annotations

from collections.abc import Sequence

from roll_agentic.mux.profile import JobProfile
from roll_agentic.mux.round_robin import MemberPlan


def lone_rate(plan: MemberPlan, profile: JobProfile) -> float:
    """A job alone in its group: solo speed on its own node counts, slower on fewer.

    Its plan's iteration, not a round-robin run: the evaluator's switch
    overheads are an artefact of running alone. Below 1 only when it runs
    its rollouts on fewer rollout nodes than it was profiled on.
    """
    return min(1.0, profile.planned_iter_s / plan.times.iter_s)


def lone_slo_ok(plan: MemberPlan, profile: JobProfile, headroom: float) -> bool:
    """Does a job alone in its group keep its SLO? On its own node counts it is
    the reference itself; on fewer rollout nodes its longer iteration must fit
    the SLO (with headroom) like any co-run period."""
    iter_s = plan.times.iter_s
    return iter_s <= profile.planned_iter_s or slo_periods_ok([iter_s], [profile], headroom)


def progress_rate(
    periods: list[float], profiles: Sequence[JobProfile], plans: Sequence[MemberPlan]
) -> float:
    """Summed progress of members running at `periods`: 1 per job at solo speed
    (a lone member: `lone_rate` of its plan)."""
    if len(profiles) == 1:
        return lone_rate(plans[0], profiles[0])
    return sum(min(1.0, p.planned_iter_s / t) for t, p in zip(periods, profiles, strict=True))


# Plans run on typical phase lengths. In turns, a phase spanning several
# nodes waits for the slowest of their previous phases, so lengths that vary
# from iteration to iteration stretch a group's cycle beyond its plan, and
# more the more members share nodes: measured on drawn lengths, pairs 0.7-
# 0.8 % on the mean, groups of 4-5 with gangs 1.6-3.2 %, and one group of six
# (`sim scale --jobs 2000 --share-any`) 3.5-4.7 %, which with its cold start
# took a 1.145-SLO member to 1.1457x. So each member beyond five adds to the
# headroom kept (groups that big form only at scale or with `--share-any`).
LARGE_GROUP = 5
HEADROOM_PER_EXTRA_MEMBER = 0.01


def group_headroom(headroom: float, n_members: int) -> float:
    """The SLO share a group of `n_members` keeps back: `headroom`, more beyond `LARGE_GROUP`."""
    return headroom + HEADROOM_PER_EXTRA_MEMBER * max(0, n_members - LARGE_GROUP)


def slo_periods_ok(periods: list[float], profiles: list[JobProfile], headroom: float) -> bool:
    """Planned co-run periods against each member's SLO x its typical solo iteration,
    with `headroom` kept back (more in large groups: `group_headroom`)."""
    keep = 1.0 + group_headroom(headroom, len(profiles))
    return all(
        t * keep <= p.slo * p.planned_iter_s
        for t, p in zip(periods, profiles, strict=True)
    )
