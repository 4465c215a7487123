from dataclasses import replace

from roll_agentic.mux.profile import ClusterSpec, JobProfile, profile_problems


def _job(**fields) -> JobProfile:
    base = JobProfile("a", "balanced", "small", 1, 1, 600.0, 600.0, 8.0, 2.0, 112.0, 14.0, 1.5)
    return replace(base, **fields)


def test_a_sound_profile_has_no_problems_and_the_edges_are_where_they_say():
    assert profile_problems(_job(), ClusterSpec()) == []
    assert profile_problems(_job(slo=1.0, sync_s=0.0, tail_hold=1.0, roll_typical=1.0)) == []
    assert profile_problems(_job(tail_hold=0.0)) and profile_problems(_job(colo_roll_speed=0.0))


def test_every_problem_is_named_with_the_value_found():
    found = profile_problems(_job(job_id="", n_train=1.5, slo=float("nan"), rollout_mem_gb=-1.0))
    assert len(found) == 4
    assert any("job_id" in p for p in found)
    assert any("n_train" in p and "1.5" in p for p in found)
    assert any("slo" in p and "nan" in p for p in found)
    assert any("rollout_mem_gb" in p and "-1.0" in p for p in found)


def test_host_memory_is_checked_against_the_cluster_only_when_given_one():
    big = _job(rollout_mem_gb=2048.0)
    assert profile_problems(big) == []
    (problem,) = profile_problems(big, ClusterSpec())
    assert "2048 GB of host memory per rollout node; one H20 node has 1024 GB" in problem
