"""Candidate bounds: which pinnings a group offers a job before any is simulated."""

from roll_agentic.mux.candidate_rank import RankRules, rank_candidates
from roll_agentic.mux.candidates import rollout_options
from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import SLO_HEADROOM, RollMuxPolicy
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool

SPEC = ClusterSpec(rollout_shrink=False)


def _job(i: int, n_t: int = 1) -> JobProfile:
    return JobProfile(
        f"j{i}", "balanced", "small", 1, n_t, 900.0, 900.0, 8.0, 2.0, 112.0, 14.0, 2.0
    )


def _ranked(extra_train: int, share_any: bool) -> list:
    book = GroupBook(SPEC)
    policy = RollMuxPolicy(SPEC)
    first = _job(0, n_t=2)
    book.apply(policy.place(book.groups, first), first)
    (group,) = book.groups.values()
    view = policy._group_view(group)
    job = _job(1)
    rules = RankRules(
        SPEC.warm_switch_s, SPEC.price(Pool.ROLLOUT), SPEC.price(Pool.TRAIN),
        share_any, False, True, True,
    )
    options = rollout_options(job, SPEC, SLO_HEADROOM, extra_train)
    ranked: list = []
    rank_candidates(
        ranked, rules, view, group, job, options, extra_train, view.train_order, view.rollout_order,
        float("inf"), job.solo_cost_per_hour(SPEC),
    )
    return ranked


def test_the_paper_kinds_reuse_the_jobs_own_training_count_and_open_only_the_extra():
    own = _ranked(0, share_any=False)
    assert own and all(t_new == 0 and n_train == 1 for _, _, _, t_new, _, _, n_train in own)
    scaled = _ranked(1, share_any=False)
    assert scaled and all(t_new == 1 and n_train == 2 for _, _, _, t_new, _, _, n_train in scaled)
    # Each scaled candidate pins one of the group's two training nodes (after
    # the rollout node it reuses, if any) and opens a second.
    assert all(len(pinned) == (1 - r_new) + 1 for _, _, r_new, _, pinned, _, _ in scaled)
    assert scaled[0][5].train_s < own[0][5].train_s


def test_share_any_may_open_any_number_of_the_training_nodes():
    # Both of the group's training nodes, or one and a new one. Opening two
    # costs more than the job's own group (one rollout, one training node).
    scaled = _ranked(1, share_any=True)
    assert {t_new for _, _, _, t_new, _, _, _ in scaled} == {0, 1}
    assert all(n_train == 2 for *_, n_train in scaled)
    keys = [c[0] for c in scaled]
    assert keys == sorted(keys, key=lambda k: k[4])  # appended in index order
