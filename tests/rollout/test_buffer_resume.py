"""A resume whose rollout mode differs from the run's: no prompt of the checkpoint is lost."""

import asyncio

from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from roll_agentic.rollout.trajectory import Trajectory


def _traj(ticket, i):
    return Trajectory(f"{ticket.group_id}-{i}", ticket.group_id, ticket.task, ticket.seed, ticket.issued_version,
                      token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], reward=float(i % 2), status="ok")


async def _short_round_then_advance(tail: TailBatchingBuffer, issued: int, finished: int) -> list:
    """Issues `issued` tickets of the short round, finishes the first `finished` (the step's
    P0), takes them as the batch and advances: the rest are deferred to the long queue."""
    tickets = [await tail.next_ticket() for _ in range(issued)]
    for t in tickets[:finished]:
        await tail.put_many([_traj(t, i) for i in range(2)])
    await tail.get_batch(finished, 0)
    await tail.advance(1)
    return tickets


def test_a_tail_batching_run_resumed_async_still_rolls_its_deferred_prompts():
    """rollout.mode=tail_batching -> async on resume: the long queue (prompts that lost a short
    round's race, never trained) was read by nobody, so those prompts were silently skipped."""
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        tail = TailBatchingBuffer(shares, groups_per_step=2, eta=2.0, seed=4)
        tickets = await _short_round_then_advance(tail, 4, 2)
        deferred = [(t.task, t.seed) for t in tickets[2:]]
        assert tail.round_kind == "long"  # the next round runs them ...
        state = tail.export_state()
        assert sorted(tuple(x) for x in state["long_queue"]) == sorted(deferred)  # ... and the checkpoint keeps them there

        plain = TrajectoryBuffer(shares, groups_per_step=2, alpha=1, seed=99)
        plain.import_state(state)
        issued = [(t.task, t.seed) for t in await plain.next_tickets(8)]
        assert set(deferred) <= set(issued)
    asyncio.run(main())


def test_a_long_rounds_fill_prompts_survive_a_resume_in_another_mode():
    """A long round is filled with fresh prompts of the tasks its deferred ones leave out, kept in
    `round_fill`: a plain buffer resumed from it read only the long queue, and they were lost."""
    async def main():
        shares = [TaskShare("a", 1.0, 2), TaskShare("b", 0.01, 2)]  # b: rarely drawn, filled in
        tail = TailBatchingBuffer(shares, groups_per_step=2, eta=2.0, seed=4)
        await _short_round_then_advance(tail, 4, 2)
        assert tail.round_kind == "long"
        state = tail.export_state()
        fill = [tuple(x) for x in state["round_fill"]]
        assert fill, state

        plain = TrajectoryBuffer(shares, groups_per_step=2, alpha=1, seed=99)
        plain.import_state(state)
        issued = [(t.task, t.seed) for t in await plain.next_tickets(8)]
        assert set(fill) <= set(issued)
    asyncio.run(main())
