import asyncio

import pytest

from roll_agentic.engine.router import Router
from roll_agentic.engine.router_client import CoalescingRouterClient
from tests.rollout.local_handle import LocalHandle


class SlowRouter:
    """A Router whose calls take a while, like a remote actor's, and are counted."""

    def __init__(self):
        self.inner = Router([("default", "cpu"), ("default", "cpu")], {"t": "default"})
        self.batches: list[int] = []

    async def assign_many(self, requests):
        self.batches.append(len(requests))
        await asyncio.sleep(0.01)
        return self.inner.assign_many(requests)

    async def release_many(self, traj_ids):
        await asyncio.sleep(0.01)
        self.inner.release_many(traj_ids)


def test_a_burst_of_assignments_becomes_few_calls_with_the_same_decisions():
    async def main():
        router = SlowRouter()
        client = CoalescingRouterClient(LocalHandle(router))
        indices = await asyncio.gather(*(client.assign("t", f"e{i}", 10) for i in range(64)))
        return router, client, indices

    router, client, indices = asyncio.run(main())
    assert router.batches == [64]  # asked in the same loop turn: one call
    assert client.calls == 1
    # Decided as if one by one: least-loaded engine first, so the 64 split 32/32.
    assert sorted(indices.count(i) for i in (0, 1)) == [32, 32]
    assert [e.active for e in router.inner.table.engines] == [32, 32]


def test_requests_arriving_during_a_call_leave_together_in_the_next():
    async def main():
        router = SlowRouter()
        client = CoalescingRouterClient(LocalHandle(router))
        first = asyncio.ensure_future(client.assign("t", "e0"))
        await asyncio.sleep(0.002)  # e0's call is in flight now
        rest = [asyncio.ensure_future(client.assign("t", f"e{i}")) for i in range(1, 10)]
        await asyncio.gather(first, *rest)
        return router

    assert asyncio.run(main()).batches == [1, 9]


def test_releases_are_batched_and_free_the_engines():
    async def main():
        router = SlowRouter()
        client = CoalescingRouterClient(LocalHandle(router))
        await asyncio.gather(*(client.assign("t", f"e{i}") for i in range(8)))
        for i in range(8):
            client.release(f"e{i}")
        await asyncio.sleep(0.1)
        return router

    router = asyncio.run(main())
    assert [e.active for e in router.inner.table.engines] == [0, 0]


def test_a_router_failure_reaches_every_waiter():
    class Broken:
        async def assign_many(self, requests):
            raise RuntimeError("router actor died")

    async def main():
        client = CoalescingRouterClient(LocalHandle(Broken()))
        return await asyncio.gather(*(client.assign("t", f"e{i}") for i in range(3)), return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) for r in results)
    with pytest.raises(RuntimeError):
        raise results[0]
