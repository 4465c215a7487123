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
