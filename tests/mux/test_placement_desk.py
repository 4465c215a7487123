"""The multiplexer's queue: waiting jobs placed together, onto free physical nodes."""

from dataclasses import replace

from roll_agentic.mux.group import GroupBook
from roll_agentic.mux.placement import RollMuxPolicy
from roll_agentic.mux.placement_desk import PlacementDesk
from roll_agentic.mux.profile import ClusterSpec, JobProfile

SPEC = ClusterSpec()


def prof(name, rho, n_rollout=1, n_train=1, length=1800.0, slo=1.5):
    return JobProfile(name, "x", "small", n_rollout, n_train, rho * length, (1 - rho) * length,
                      8.0, 2.0, 112.0, 14.0, slo)


def desk():
    book = GroupBook(SPEC)
    return PlacementDesk(book, RollMuxPolicy(SPEC))


def test_waiting_jobs_are_placed_together_on_distinct_free_nodes():
    d = desk()
    for p in (prof("a", 0.72), prof("b", 0.70), prof("c", 0.30), prof("d", 0.28)):
        d.add(p)
    admitted, reasons = d.place_waiting([f"r{i}" for i in range(4)], [f"t{i}" for i in range(4)])
    assert sorted(a.name for a in admitted) == ["a", "b", "c", "d"] and not reasons and not d.waiting
    given = [phys for a in admitted for phys in a.opened.values()]
    assert len(given) == len(set(given))  # no physical node handed out twice
    # As a batch, each rollout-heavy job shares with a train-heavy one (one by
    # one in this order, the two rollout-heavy ones would have paired up).
    for g in d.book.groups.values():
        assert sorted(j.roll_s > j.train_s for j in g.members.values()) == [False, True]


def test_a_job_that_does_not_fit_waits_with_a_reason_and_does_not_hold_up_the_others():
    d = desk()
    d.add(prof("big", 0.5, n_rollout=3, n_train=2, slo=1.0))
    d.add(prof("small", 0.5, slo=1.0))
    admitted, reasons = d.place_waiting(["r0", "r1"], ["t0", "t1"])
    assert [a.name for a in admitted] == ["small"]
    assert list(d.waiting) == ["big"] and "a new group needs 3 rollout + 2 training" in reasons["big"]
    assert set(d.book.job_group) == {"small"}
    d.drop("big")
    assert d.place_waiting([], []) == ([], {})


def test_jobs_of_another_trainer_form_never_share_a_training_node_and_say_why_they_wait():
    """A full job after a LoRA one needs its trainer rebuilt from storage, at every switch, which
    the SLO check does not price (`admission.placement_form`): such a job gets a node of its own
    or waits for one, the form named in its reason. Jobs of one form pair as usual."""
    lora = "lora"
    d = desk()
    d.add(replace(prof("a", 0.72), form=lora))
    d.add(replace(prof("b", 0.28), form="full"))
    admitted, reasons = d.place_waiting(["r0", "r1"], ["t0"])
    assert [a.name for a in admitted] == ["a"]
    assert "another trainer form (lora, this job: full)" in reasons["b"]
    d.add(replace(prof("c", 0.28), form=lora))  # a's form: it packs into a's group
    admitted, reasons = d.place_waiting(["r1"], [])
    assert [a.name for a in admitted] == ["c"] and list(d.waiting) == ["b"]
    assert d.book.job_group["c"] == d.book.job_group["a"]
    admitted, _ = d.place_waiting(["r1"], ["t1"])  # a training node of its own
    assert [a.name for a in admitted] == ["b"] and d.book.job_group["b"] != d.book.job_group["a"]
