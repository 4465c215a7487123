"""A reward that costs real work: `work_ms` of CPU (50-500 ms in the benchmark).

The work is counted in this thread's CPU time, so it costs the same CPU
whether it runs in a Lambda worker or in a trainer's thread pool, where
Python threads doing pure-Python work take turns on the GIL. The reward
itself is a deterministic function of `seed`, so callers can check it.
"""

import hashlib
import json
import time


def reward(summary: dict) -> float:
    work_s = float(summary.get("work_ms", 100)) / 1000.0
    t0 = time.thread_time()
    digest = str(summary.get("seed", 0)).encode()
    while time.thread_time() - t0 < work_s:
        for _ in range(200):
            digest = hashlib.sha256(digest).digest()
    return (int(summary.get("seed", 0)) % 7) / 7.0


def handler(event, context):
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary)}
