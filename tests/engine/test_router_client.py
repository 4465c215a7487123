import asyncio

import pytest

from roll_agentic.engine.router import Router
from roll_agentic.engine.router_client import CoalescingRouterClient
from tests.rollout.local_handle import LocalHandle


class SlowRouter:
    """A Router whose calls take a while, like a remote actor's, and are counted."""

    def __init__(self, engines: int = 2, delay_s: float = 0.01, note_delay_s: float = 0.01):
        self.delay_s = delay_s
        self.note_delay_s = note_delay_s
        self.inner = Router([("default", "cpu")] * engines, {"t": "default"})
        self.batches: list[int] = []
        self.notes: list[int] = []

    async def assign_many(self, requests):
        self.batches.append(len(requests))
        await asyncio.sleep(self.delay_s)
        return self.inner.assign_many(requests)

    async def notify_many(self, notes):
        self.notes.append(len(notes))
        await asyncio.sleep(self.note_delay_s)
        self.inner.notify_many(notes)


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
        await asyncio.sleep(0.3)
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


def test_with_one_engine_assignments_need_no_round_trip_and_the_router_still_counts_them():
    async def main():
        router = SlowRouter(engines=1)
        client = CoalescingRouterClient(LocalHandle(router), only_engine=0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        indices = await asyncio.gather(*(client.assign("t", f"e{i}", 10) for i in range(5)))
        answered_in = loop.time() - t0
        await asyncio.sleep(0.3)  # the told assignments arrive (after their linger)
        active_mid = router.inner.table.engines[0].active
        for i in range(5):
            client.release(f"e{i}")
        await asyncio.sleep(0.3)
        return router, client, indices, answered_in, active_mid

    router, client, indices, answered_in, active_mid = asyncio.run(main())
    assert indices == [0] * 5 and client.calls == 0 and router.batches == []
    assert answered_in < 0.01  # no 10 ms router call on the way
    assert active_mid == 5 and router.inner.table.snapshot()["routed"] == {"t": {"default": 5}}
    assert router.inner.table.engines[0].active == 0


def test_a_release_told_in_the_same_batch_as_its_assignment_comes_after_it():
    router = Router([("default", "cpu")], {"t": "default"})
    router.notify_many([("assign", "t", "e0", 3, 0), ("release", "e0")])
    assert router.table.engines[0].active == 0 and "e0" not in router.table.sticky
    router.mark_dead(0)
    # The worker's one engine, marked dead meanwhile: the request went there all the same, so
    # it is counted as routed there and no fallback is invented (five were, before).
    router.notify_many([("assign", "t", f"e{k}", 3, 0) for k in range(1, 6)])
    assert router.table.fallbacks == 0 and router.table.routed["t"] == {"default": 6}


def test_notes_of_episodes_ending_a_few_at_a_time_share_calls():
    async def main():
        router = SlowRouter(engines=1)
        client = CoalescingRouterClient(LocalHandle(router), only_engine=0, note_linger_s=0.05)
        await asyncio.gather(*(client.assign("t", f"e{i}", 10) for i in range(16)))
        for i in range(16):  # episodes end two at a time, 5 ms apart
            client.release(f"e{i}")
            if i % 2:
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        return router

    router = asyncio.run(main())
    assert sum(router.notes) == 32  # every assignment and release arrived, in order
    assert len(router.notes) <= 3  # not one call per pair of endings
    assert router.inner.table.engines[0].active == 0


def test_an_episode_cancelled_while_its_assignment_queues_leaves_nothing_assigned():
    # Tail batching cancels stragglers; one waiting behind an assignment call in flight
    # released at once, and that release reached the router before its assignment did.
    async def main():
        router = SlowRouter(delay_s=0.2)  # longer than the releases' linger
        client = CoalescingRouterClient(LocalHandle(router))
        first = asyncio.ensure_future(client.assign("t", "kept"))
        await asyncio.sleep(0.01)
        straggler = asyncio.ensure_future(client.assign("t", "aborted"))
        await asyncio.sleep(0.01)
        straggler.cancel()
        client.release("aborted")  # what the worker's episode does on its way out
        await first
        await asyncio.sleep(0.6)
        return router

    router = asyncio.run(main())
    assert set(router.inner.table.sticky) == {"kept"}
    assert sum(e.active for e in router.inner.table.engines) == 1  # no active count leaked
    assert router.batches == [1]  # the cancelled request was never sent


def _active(router: SlowRouter) -> int:
    return sum(e.active for e in router.inner.table.engines)


def test_a_retried_trajectory_is_released_before_it_is_assigned_again():
    # A worker retries a trajectory at once (EnvFailure, Stale: no back-off). Attempt 1's
    # release lingered on the notes channel and reached the router after attempt 2's
    # assignment: that one found the trajectory still sticky (not counted), and the late
    # release then removed it, so the router saw no load while attempt 2 ran.
    async def main():
        router = SlowRouter()
        client = CoalescingRouterClient(LocalHandle(router), note_linger_s=0.05)
        await client.assign("t", "a", 4)  # attempt 1
        client.release("a")  # attempt 1 ends
        await client.assign("t", "a", 4)  # attempt 2, before the release's linger is over
        await asyncio.sleep(0.2)
        during = _active(router)
        client.release("a")
        await asyncio.sleep(0.2)
        return router, client, during

    router, client, during = asyncio.run(main())
    assert during == 1
    assert _active(router) == 0 and router.inner.table.sticky == {}
    assert router.inner.table.engines[0].assigned_total + router.inner.table.engines[1].assigned_total == 2
    # The pending release left just before the assignment, in place of the lingering call,
    # not beside it: still one notes call per release.
    assert router.batches == [1, 1] and router.notes == [1, 1]


def test_a_retry_waits_for_its_release_already_on_the_way():
    # The release's notes call has left (no linger) but the router has not run it yet.
    async def main():
        router = SlowRouter(note_delay_s=0.1)
        client = CoalescingRouterClient(LocalHandle(router), note_linger_s=0)
        await client.assign("t", "a", 4)
        client.release("a")
        await asyncio.sleep(0.005)  # the release's call is in flight
        await client.assign("t", "a", 4)
        await asyncio.sleep(0.2)
        return router

    router = asyncio.run(main())
    assert _active(router) == 1 and set(router.inner.table.sticky) == {"a"}
    assert router.notes == [1] and router.batches == [1, 1]


def test_assignments_of_other_trajectories_leave_pending_releases_lingering():
    # The common path: new trajectories while others' releases wait for company. Nothing is
    # flushed early, so the releases still share one call.
    async def main():
        router = SlowRouter()
        client = CoalescingRouterClient(LocalHandle(router), note_linger_s=0.05)
        await asyncio.gather(*(client.assign("t", f"e{i}") for i in range(4)))
        client.release("e0")
        client.release("e1")
        await client.assign("t", "e4")
        await asyncio.sleep(0.005)
        client.release("e2")
        await asyncio.sleep(0.2)
        return router

    router = asyncio.run(main())
    assert router.batches == [4, 1] and router.notes == [3]
    assert _active(router) == 2 and set(router.inner.table.sticky) == {"e3", "e4"}


def test_a_retry_cancelled_while_its_release_is_flushed_is_never_sent():
    async def main():
        router = SlowRouter(note_delay_s=0.1)
        client = CoalescingRouterClient(LocalHandle(router), note_linger_s=0.05)
        await client.assign("t", "a", 4)
        client.release("a")
        retry = asyncio.ensure_future(client.assign("t", "a", 4))
        await asyncio.sleep(0.02)  # the release is being flushed ahead of the retry
        retry.cancel()
        client.release("a")  # what the cancelled episode does on its way out
        await asyncio.sleep(0.4)
        return router

    router = asyncio.run(main())
    assert router.batches == [1]  # the cancelled retry was never sent
    assert _active(router) == 0 and router.inner.table.sticky == {}
