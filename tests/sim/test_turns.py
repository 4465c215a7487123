"""Node turns in the simulator: round robin per node, and joins that starve no one."""

from roll_agentic.sim.turns import NodeTurns


def served(t: NodeTurns, node: int, phases: int) -> list[str]:
    """Whom `node` serves, phase after phase, each job ready at once."""
    order = []
    for _ in range(phases):
        j = t.turn(node)
        order.append(j)
        t.started(j, [node])
        t.iteration_done(j)
    return order


def test_jobs_on_a_node_alternate_whoever_is_ready_first():
    t = NodeTurns()
    t.join("a", [1], [])
    t.join("b", [1], ["a"])
    assert served(t, 1, 6) == ["a", "b"] * 3


def test_a_newcomer_tying_drifted_partners_together_waits_one_phase_at_most():
    # a and b are in one group but share no node, so their rounds drifted:
    # a has run 10 iterations, b none. c joins on both their nodes.
    t = NodeTurns()
    t.join("a", [1], [])
    t.join("b", [2], ["a"])
    for _ in range(10):
        t.started("a", [1])
        t.iteration_done("a")
    t.join("c", [1, 2], ["a", "b"])
    for node, partner in ((1, "a"), (2, "b")):
        assert t.turn(node) == partner  # its phase of this round first ...
        t.started(partner, [node])
        assert t.turn(node) == "c"  # ... then the newcomer, not ten rounds later
    assert t.holds_turn("c", [1, 2])


def test_leaving_hands_the_turn_on():
    t = NodeTurns()
    t.join("a", [1, 2], [])
    t.join("b", [2], ["a"])
    assert t.turn(2) == "a"
    assert t.leave("a") == (1, 2)
    assert t.turn(2) == "b" and t.turn(1) is None


def test_a_planned_order_puts_a_later_joiner_first_within_a_round():
    # A re-plan orders a group's members; they move in whenever their
    # iterations end. b joins second but was planned first.
    t = NodeTurns()
    planned_at = t.joins  # positions planned then: between it and the next join
    t.join("a", [1], [], order=planned_at + 2 / 3)
    t.join("b", [1], ["a"], order=planned_at + 1 / 3)
    t.join("c", [1], ["a", "b"])  # an ordinary joiner after them: after both
    assert served(t, 1, 6) == ["b", "a", "c"] * 2


def test_a_fifo_rollout_node_serves_in_queue_order_and_lets_a_fast_job_lap():
    t = NodeTurns(fifo={1})
    t.join("a", [1, 2], [])
    t.join("b", [1, 3], ["a"])
    assert t.turn(1) is None  # nothing queued: it waits for no one
    t.queue_rollout("b")
    t.queue_rollout("a")
    assert t.turn(1) == "b" and not t.holds_turn("a", [1])  # queued first, served first
    t.started("b", [1])
    assert t.turn(1) == "a"
    t.started("a", [1])
    t.queue_rollout("b")  # b is back before a: it goes again, no turn to wait for
    assert t.turn(1) == "b"


def test_a_fifo_node_links_no_partners_when_a_newcomer_joins():
    # a and b share only the FIFO rollout node 1, so their rounds drift
    # apart freely; a newcomer on b's training node 3 must not be made to
    # wait for b to catch up with a's round.
    t = NodeTurns(fifo={1})
    t.join("a", [1, 2], [])
    t.join("b", [1, 3], ["a"])
    for _ in range(10):
        t.started("a", [2])
        t.iteration_done("a")
    t.join("c", [3], ["a", "b"])
    assert t.turn(3) == "b"
    t.started("b", [3])
    assert t.turn(3) == "c"
