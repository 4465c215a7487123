"""Calls `obj.method.remote(...)` in this process: the Ray call convention without Ray.

Lets a test drive the real RolloutWorker, Router, TrajectoryBuffer and an
engine in one event loop, so it can step in between (e.g. bump the weight
version mid-episode).
"""

from __future__ import annotations

import asyncio


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        result = self.fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(result)
        return fut


class LocalHandle:
    def __init__(self, obj):
        self._obj = obj

    def __getattr__(self, name):
        return _Method(getattr(self._obj, name))
