import asyncio
from collections import deque

from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.step_mix import StepMix
from roll_agentic.rollout.trajectory import Ticket
from tests.rollout.test_buffer import _traj


def _group(task, seed):
    ticket = Ticket(f"{task}{seed}", task, seed, 2, 0)
    return [_traj(ticket, i, 0, reward=float(i)) for i in range(2)]


def test_quotas_follow_the_weights_and_carry_their_remainder_to_the_next_step():
    mix = StepMix([TaskShare("a", 2.0, 2), TaskShare("b", 1.0, 2)])
    quota, _ = mix.quotas(6)
    assert quota == {"a": 4, "b": 2}
    dealt = {"a": 0, "b": 0}
    for _ in range(3):  # 4 slots a step: 8 and 4 over three steps, never a step of one task
        quota, mix.credit = mix.quotas(4)
        assert min(quota.values()) >= 1
        for k, n in quota.items():
            dealt[k] += n
    assert dealt == {"a": 8, "b": 4}


def test_take_waits_for_a_short_task_with_groups_on_the_way_and_keeps_the_rest():
    mix = StepMix([TaskShare("a", 1.0, 2), TaskShare("b", 1.0, 2)])
    ready = deque([_group("a", s) for s in range(4)])
    assert mix.take(ready, 2, on_the_way=lambda task: task == "b") is None
    assert len(ready) == 4  # nothing taken while it waits
    ready.append(_group("b", 9))
    batch = mix.take(ready, 2, on_the_way=lambda task: True)
    assert [g[0].task for g in batch] == ["a", "b"]
    assert [g[0].seed for g in ready] == [1, 2, 3]  # the others stay ready, oldest first


def test_take_fills_a_short_task_with_nothing_on_the_way_from_the_others():
    mix = StepMix([TaskShare("a", 1.0, 2), TaskShare("b", 1.0, 2)])
    ready = deque([_group("a", s) for s in range(3)])
    batch = mix.take(ready, 2, on_the_way=lambda task: False)
    assert [g[0].seed for g in batch] == [0, 1]
    assert len(ready) == 1
    ready = deque([_group("a", 0)])  # ... once the others fill the batch
    assert mix.take(ready, 2, on_the_way=lambda task: False) is None


async def _finish(buf, tickets, version=0):
    for tk in tickets:
        for i in range(tk.group_size):
            await buf.put(_traj(tk, i, version, reward=float(i)))


def test_a_step_is_not_one_task_when_the_other_task_finishes_later():
    """The quick task's groups all finish first: the step still takes both tasks' shares."""
    async def main():
        buf = TrajectoryBuffer([TaskShare("quick", 1.0, 2), TaskShare("slow", 1.0, 2)], groups_per_step=4,
                               alpha=1)
        tickets = await buf.next_tickets(8)
        quick = [t for t in tickets if t.task == "quick"]
        slow = [t for t in tickets if t.task == "slow"]
        await _finish(buf, quick)  # four quick groups: a whole step's count, one task
        getter = asyncio.ensure_future(buf.get_batch(4, version=0))
        await asyncio.sleep(0.05)
        assert not getter.done()  # waits for the slow task's share
        await _finish(buf, slow[:2])
        batch = await asyncio.wait_for(getter, 1)
        assert sorted(g[0].task for g in batch) == ["quick", "quick", "slow", "slow"]
        await buf.advance(1)
        await _finish(buf, slow[2:])
        batch = await asyncio.wait_for(buf.get_batch(4, version=1), 1)
        assert sorted(g[0].task for g in batch) == ["quick", "quick", "slow", "slow"]
    asyncio.run(main())


def test_resumed_run_keeps_the_mix_of_its_steps():
    """A resume re-issues a whole step's prompts at once; steps after it still mix the tasks."""
    async def main():
        shares = [TaskShare("quick", 1.0, 2), TaskShare("slow", 1.0, 2)]
        buf = TrajectoryBuffer(shares, groups_per_step=2, alpha=1)
        await _finish(buf, await buf.next_tickets(4))
        await buf.get_batch(2, version=0)
        await buf.advance(1)
        clone = TrajectoryBuffer(shares, groups_per_step=2, alpha=1, seed=7)
        clone.import_state(buf.export_state())
        assert clone._mix.credit == buf._mix.credit
        tickets = await clone.next_tickets(4)
        await _finish(clone, [t for t in tickets if t.task == "quick"], version=1)
        getter = asyncio.ensure_future(clone.get_batch(2, version=1))
        await asyncio.sleep(0.05)
        assert not getter.done()
        await _finish(clone, [t for t in tickets if t.task == "slow"], version=1)
        batch = await asyncio.wait_for(getter, 1)
        assert sorted(g[0].task for g in batch) == ["quick", "slow"]
    asyncio.run(main())


def test_a_task_whose_only_tickets_are_held_for_the_next_step_is_not_waited_for():
    """Held tickets generate only after the step: waiting for them would never end."""
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2), TaskShare("b", 1.0, 2)], groups_per_step=2, alpha=0,
                               prepare_ahead=True)
        first = await buf.next_tickets(2)
        a = [t for t in first if t.task == "a"]
        b = [t for t in first if t.task == "b"]
        # b's group fails for good (prompt too long: not re-rolled), a's finishes
        for i in range(2):
            await buf.put(_traj(b[0], i, 0, status="prompt_too_long"))
        await _finish(buf, a)
        [extra] = await buf.next_tickets(1)  # the freed place: a fresh ticket
        await _finish(buf, [extra])
        held = await buf.next_tickets(2)
        assert all(t.opens_at_step == 1 for t in held)
        batch = await asyncio.wait_for(buf.get_batch(2, version=0), 1)
        assert len(batch) == 2
    asyncio.run(main())
