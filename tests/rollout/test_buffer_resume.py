"""A resume whose rollout mode differs from the run's: no prompt of the checkpoint is lost."""

import asyncio

from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from roll_agentic.rollout.trajectory import Trajectory


def _traj(ticket, i):
    return Trajectory(f"{ticket.group_id}-{i}", ticket.group_id, ticket.task, ticket.seed, ticket.issued_version,
                      token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], reward=float(i % 2), status="ok")


def test_a_tail_batching_run_resumed_async_still_rolls_its_deferred_prompts():
    """rollout.mode=tail_batching -> async on resume: the long queue (prompts that lost a short
    round's race, never trained) was read by nobody, so those prompts were silently skipped."""
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        tail = TailBatchingBuffer(shares, groups_per_step=2, eta=2.0, seed=4)
        tickets = [await tail.next_ticket() for _ in range(4)]
        for t in tickets[:2]:
            await tail.put_many([_traj(t, i) for i in range(2)])
        await tail.get_batch(2, 0)
        await tail.advance(1)
        deferred = [(t.task, t.seed) for t in tickets[2:]]
        assert tail.round_kind == "long"  # the next round runs them ...
        state = tail.export_state()
        assert sorted(tuple(x) for x in state["long_queue"]) == sorted(deferred)  # ... and the checkpoint keeps them there

        plain = TrajectoryBuffer(shares, groups_per_step=2, alpha=1, seed=99)
        plain.import_state(state)
        issued = [(t.task, t.seed) for t in await plain.next_tickets(8)]
        assert set(deferred) <= set(issued)
    asyncio.run(main())
