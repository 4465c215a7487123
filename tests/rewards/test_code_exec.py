"""rewards/code_exec.py: tests run in subprocesses under RollPacker's adaptive timeout."""

from __future__ import annotations

import pytest

from rewards import code_exec

ADD = "def add(a, b):\n    return a + b\n"


@pytest.fixture(autouse=True)
def fresh_records():
    code_exec._SLOWEST.clear()
    yield
    code_exec._SLOWEST.clear()


def test_adaptive_timeout_formula():
    assert code_exec.adaptive_timeout(None) == 2.0
    assert code_exec.adaptive_timeout(1.0) == 2.0
    assert code_exec.adaptive_timeout(4.0) == 6.0
    assert code_exec.adaptive_timeout(100.0) == 30.0


def test_share_of_tests_passed():
    out = code_exec.score({"code": ADD, "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(-1, 1) == 0"]})
    assert out["reward"] == pytest.approx(2 / 3)
    assert out["passed"] == [True, False, True] and out["timed_out"] == [False, False, False]
    assert code_exec.reward({"code": "this is not python", "tests": ["assert True"]}) == 0.0
    assert code_exec.reward({"code": ADD, "tests": []}) == 0.0
    with pytest.raises(TypeError):
        code_exec.reward({"code": ADD, "tests": [["input", "expected"]]})
    # one test as a bare string: it ran one character per "test", and wrong code scored 0.22
    with pytest.raises(TypeError, match="tests must be a list"):
        code_exec.reward({"code": "def add(a, b):\n    return a - b\n", "tests": "assert add(2, 3) == 5"})


def test_more_tests_than_the_cap_are_refused_not_cut(monkeypatch):
    """Tests past MAX_TESTS were dropped and the reward taken over the rest: code failing
    only the dropped ones scored 1.0."""
    ran = []
    monkeypatch.setattr(code_exec, "_run_one", lambda program, limit_s: ran.append(program) or (True, 0.01, False))
    tests = ["assert add(1, 1) == 2"] * code_exec.MAX_TESTS + ["assert add(2, 2) == 5"]
    with pytest.raises(ValueError, match=r"tests must be at most 64 Python statements \(MAX_TESTS\), got 65"):
        code_exec.score({"code": ADD, "tests": tests})
    assert ran == []  # refused before any test ran
    assert code_exec.score({"code": ADD, "tests": tests[:-1]})["reward"] == 1.0  # exactly the cap is fine
    assert len(ran) == code_exec.MAX_TESTS


@pytest.mark.slow
def test_over_the_limit_scores_zero_and_hints_raise_the_limit():
    slow = "import time\ndef f():\n    time.sleep(2.5)\n    return 1\n"
    test = "assert f() == 1"
    cut = code_exec.score({"code": slow, "tests": [test]})
    assert cut["reward"] == 0.0 and cut["timed_out"] == [True] and cut["limit_s"] == [2.0]
    assert cut["seconds"][0] > 1.9  # not cut before the limit (timed_out: cut there, not run to the end)
    hinted = code_exec.score({"code": slow, "tests": [test], "test_time_hints": [2.4]})
    assert hinted["reward"] == 1.0 and hinted["limit_s"] == [pytest.approx(3.6)]
    # The correct run is remembered by this (warm) process: no hint needed any more.
    again = code_exec.score({"code": slow, "tests": [test]})
    assert again["reward"] == 1.0 and again["limit_s"][0] >= 3.6


def test_infinite_loop_is_killed_with_its_children():
    forker = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nwhile True:\n    pass\n"
    out = code_exec.score({"code": forker, "tests": ["pass"]})
    assert out["reward"] == 0.0 and out["timed_out"] == [True]


def test_lambda_remaining_time_caps_the_limit():
    class Ctx:
        def get_remaining_time_in_millis(self):
            return 1500

    out = code_exec.handler({"code": "while True:\n    pass\n", "tests": ["pass"]}, Ctx())
    assert out["reward"] == 0.0 and out["limit_s"][0] <= 1.0


def test_programs_no_command_line_can_carry_are_still_scored():
    """A program over 128 KB (Linux's limit on one argument) or with a NUL byte failed the whole
    reward (OSError / ValueError from Popen), so the trajectory was left out instead of scored."""
    big = ADD + "# padding\n" * 20_000  # ~200 KB
    assert code_exec.score({"code": big, "tests": ["assert add(1, 2) == 3", "assert add(1, 1) == 3"]})["passed"] == [True, False]
    # Python refuses such source: the test fails, the reward is 0, nothing raises
    assert code_exec.score({"code": ADD + "x = 1\x00\n", "tests": ["assert add(1, 2) == 3"]})["reward"] == 0.0
    assert code_exec.score({"code": ADD + "s = '\ud800'\n", "tests": ["assert add(1, 2) == 3"]})["reward"] == 0.0
