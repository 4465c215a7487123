"""Code execution: the share of tests a submitted Python program passes.

Summary keys:
- `code` (str): the program, e.g. a function definition.
- `tests` (list[str]): Python statements, typically `assert add(2, 3) == 5`;
  at most `MAX_TESTS` (64) of them, more is a ValueError.
  Each test runs as its own program, `code + "\\n" + test`, in a fresh
  `python -I` subprocess (own process group, a temp dir holding only the program as cwd) and
  passes when that exits with status 0 within its time limit (the kernel
  also caps its CPU time just above that limit, should this process die first).
- `test_time_hints` (optional list, aligned with `tests`): seconds of the
  slowest known correct run of each test (or null), e.g. measured on the
  reference solution.

Time limit of a test (RollPacker's adaptive timeout):
T = min(max(2 s, 1.5 x slowest correct run of that test), 30 s); a run over
T scores 0 for that test. The slowest correct run is the larger of the hint
and what this process has measured: in a warm Lambda environment the record
(`_SLOWEST`, keyed by the test's text) carries over between invocations. A
test never seen passing gets the 2 s floor, so pass a hint for a test whose
correct solutions take longer. Under Lambda the limit is also cut to the
function's remaining time, so the function itself never times out.

reward = passed / len(tests); 0.0 for no tests or no code.
"""

import contextlib
import hashlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

LAMBDA_MEMORY_MB = 512
LAMBDA_TIMEOUT_S = 120
MIN_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 30.0
MAX_TESTS = 64

_SLOWEST: dict[str, float] = {}  # sha256(test) -> slowest correct run seen here (s)
_LOCK = threading.Lock()


def _key(test: str) -> str:
    return hashlib.sha256(test.encode()).hexdigest()


def adaptive_timeout(slowest_correct_s: float | None) -> float:
    """RollPacker's T = min(max(2 s, 1.5 x slowest correct run), 30 s)."""
    return min(max(MIN_TIMEOUT_S, 1.5 * (slowest_correct_s or 0.0)), MAX_TIMEOUT_S)


def _run_one(program: str, limit_s: float) -> tuple[bool, float, bool]:
    """(passed, seconds, timed_out) of one program in a fresh interpreter."""
    with tempfile.TemporaryDirectory(prefix="code-exec-") as cwd:
        # From a file, not `-c program`: an argument over 128 KB (a test with a large
        # literal) or with a NUL byte could not be passed at all, and the whole reward
        # failed instead of scoring the test. Source Python cannot run (a NUL, a lone
        # surrogate) is written as is and fails like any other broken program.
        path = os.path.join(cwd, "main.py")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(program)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-I", path], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"},
        )
        # A CPU limit the kernel enforces: the test outlives this process if it
        # is killed mid-test (a stopped emulator, a function timeout), and an
        # endless loop must not burn a core for ever then.
        cpu_s = math.ceil(max(0.01, limit_s)) + 1
        with contextlib.suppress(OSError, ValueError):  # it may have exited already
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (cpu_s, cpu_s))
        try:
            code = proc.wait(timeout=max(0.01, limit_s))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole group: a test may fork
            except ProcessLookupError:
                pass
            proc.wait()
            return False, time.perf_counter() - t0, True
        return code == 0, time.perf_counter() - t0, False


def score(summary: dict, remaining_s: float | None = None) -> dict:
    """The reward and per-test details: passed, seconds, timed_out, limit_s."""
    code = summary.get("code") or ""
    raw_tests = summary.get("tests") or []
    if not isinstance(raw_tests, list):  # a lone string became one "test" per character, and those passed
        raise TypeError(f"tests must be a list of Python statements, got {type(raw_tests).__name__}")
    if len(raw_tests) > MAX_TESTS:
        # They were cut to the first MAX_TESTS and the reward taken over those: a program
        # failing only the dropped tests scored as if it passed them.
        raise ValueError(f"tests must be at most {MAX_TESTS} Python statements (MAX_TESTS), got {len(raw_tests)}: "
                         "give fewer; the reward is the share of all of them that pass")
    tests = raw_tests
    hints = list(summary.get("test_time_hints") or [])
    if not isinstance(code, str) or not all(isinstance(t, str) for t in tests):
        raise TypeError("code must be a string and tests a list of strings (Python statements)")
    if not code.strip() or not tests:
        return {"reward": 0.0, "passed": [], "seconds": [], "timed_out": [], "limit_s": []}
    deadline = None if remaining_s is None else time.monotonic() + remaining_s - 0.5
    passed, seconds, timed_out, limits = [], [], [], []
    for i, test in enumerate(tests):
        key = _key(test)
        hint = hints[i] if i < len(hints) and isinstance(hints[i], int | float) else None
        with _LOCK:
            known = max(_SLOWEST.get(key, 0.0), float(hint or 0.0)) or None
        limit = adaptive_timeout(known)
        if deadline is not None:
            limit = min(limit, max(0.0, deadline - time.monotonic()))
        ok, secs, over = _run_one(f"{code}\n{test}\n", limit)
        if ok:
            with _LOCK:
                _SLOWEST[key] = max(_SLOWEST.get(key, 0.0), secs)
        passed.append(ok)
        seconds.append(round(secs, 4))
        timed_out.append(over)
        limits.append(round(limit, 3))
    return {"reward": sum(passed) / len(tests), "passed": passed, "seconds": seconds,
            "timed_out": timed_out, "limit_s": limits}


def reward(summary: dict) -> float:
    return score(summary)["reward"]


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    remaining = context.get_remaining_time_in_millis() / 1000.0 if context is not None else None
    return score(summary, remaining)
