"""A step that waits long for its rollout says what it waits for, and what fails meanwhile."""

from roll_agentic.train.rollout_wait import EVERY_S, QUIET_S, RolloutWaitReporter


class Buffer:
    def __init__(self):
        self.ready, self.open, self.failures, self.last_error = 0, 4, {"env_failed": 2}, ""
        self.failing = {}  # TrajectoryBuffer.failing(); absent keys read as nothing failing in a row

    def wait_status(self):
        return {"ready": self.ready, "open": self.open, "failures": dict(self.failures),
                "last_error": self.last_error, **self.failing}


def test_failures_during_the_wait_are_said_with_the_last_error_at_most_every_30_s():
    buf, said = Buffer(), []
    r = RolloutWaitReporter(7, 8, buf.wait_status, said.append)
    r.started()  # the 2 env failures before the step are not news
    t0 = r.t0
    assert r.tick(t0 + EVERY_S + 1) is None  # nothing failed, and a step may wait this long quietly
    buf.failures["reward_failed"], buf.last_error, buf.ready = 16, "reward_failed: RuntimeError: boom", 3
    line = r.tick(t0 + EVERY_S + 2)
    assert line is not None and line.startswith("step 7: waiting 32 s for the rollout: 3 of 8 groups ready, 4 under way")
    assert "reward_failed 16" in line and "env_failed" not in line and "RuntimeError: boom" in line
    assert r.tick(t0 + EVERY_S + 10) is None  # not again within 30 s
    assert r.tick(t0 + 2 * EVERY_S + 3) is not None
    assert said == [line, said[1]] and len(said) == 2


def test_a_long_quiet_wait_is_said_too_without_failures():
    buf, said = Buffer(), []
    r = RolloutWaitReporter(1, 8, buf.wait_status, said.append)
    r.started()
    assert r.tick(r.t0 + QUIET_S - 1) is None
    line = r.tick(r.t0 + QUIET_S + 1)
    assert line is not None and "failed" not in line


def test_the_line_says_which_stop_applies_to_the_failures():
    buf, said = Buffer(), []
    r = RolloutWaitReporter(2, 8, buf.wait_status, said.append)
    r.started()
    buf.failures["reward_failed"], buf.last_error = 24, "reward_failed: fn: function error (Unhandled) KeyError: 'x'"
    buf.failing = {"failed_in_a_row": 3, "deterministic_in_a_row": 3, "max_failed_in_a_row": 32,
                   "failing_for_s": 31.0, "max_failing_s": 300.0}
    line = r.tick(r.t0 + EVERY_S + 1)
    assert line.endswith("every episode of the last 3 groups failed in the task's own code (a re-roll meets it "
                         "again): at 32 such groups in a row the run stops, without waiting 300 s")
    buf.failing = {**buf.failing, "deterministic_in_a_row": 0, "failed_in_a_row": 5, "max_failing_s": 60.0}
    line = r.tick(r.t0 + 2 * EVERY_S + 2)
    assert line.endswith("5 groups in a row failed, for causes that may pass (engines, services, time-outs): "
                         "if every group fails for 60 s (31 s so far) the run stops")
