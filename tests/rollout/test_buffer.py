import asyncio

from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.trajectory import Trajectory, Turn


def _traj(ticket, i, version, reward=1.0, status="ok"):
    t = Trajectory(f"{ticket.group_id}-{i}", ticket.group_id, ticket.task, ticket.seed, start_version=version,
                   token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], reward=reward, status=status)
    t.turns.append(Turn(1, 1, version, "stop", False, 0.0, 0.0))
    return t


async def _fill(buf, version, n_groups):
    tickets = [await buf.next_ticket() for _ in range(n_groups)]
    for tk in tickets:
        for i in range(tk.group_size):
            await buf.put(_traj(tk, i, version, reward=float(i % 2)))
    return tickets


def test_alpha_zero_issues_one_step_of_tickets_then_waits():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, alpha=0)
        await _fill(buf, 0, 2)
        waiting = asyncio.ensure_future(buf.next_ticket())
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the next step's groups wait for the weight update
        batch = await buf.get_batch(2, version=0)
        assert len(batch) == 2
        await asyncio.sleep(0.05)
        assert not waiting.done()  # training has not advanced the version yet
        await buf.advance(1)
        assert (await asyncio.wait_for(waiting, 1)).issued_version == 1
    asyncio.run(main())


def test_stale_group_is_dropped_and_its_prompt_requeued():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, alpha=1)
        [old] = await _fill(buf, 0, 1)
        # trainer is now at version 2: a group begun at version 0 is 2 > alpha behind
        await buf.advance(1)
        await buf.advance(2)
        getter = asyncio.ensure_future(buf.get_batch(1, version=2))
        await asyncio.sleep(0.05)
        assert not getter.done()
        assert buf.counters.groups_dropped_stale == 1
        again = await buf.next_ticket()
        assert (again.task, again.seed) == (old.task, old.seed)  # same prompt re-rolled
        for i in range(2):
            await buf.put(_traj(again, i, 2, reward=float(i)))
        batch = await asyncio.wait_for(getter, 1)
        assert batch[0][0].seed == old.seed
    asyncio.run(main())


def test_failed_trajectories_are_left_out_and_counted():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 3)], groups_per_step=1, alpha=0)
        tk = await buf.next_ticket()
        await buf.put(_traj(tk, 0, 0, reward=1.0))
        await buf.put(_traj(tk, 1, 0, reward=0.0))
        await buf.put(_traj(tk, 2, 0, reward=None, status="reward_failed"))
        [group] = await buf.get_batch(1, version=0)
        assert len(group) == 2 and all(t.status == "ok" for t in group)
        assert buf.counters.trajectories_failed == 1
        assert buf.counters.trajectories_dropped == 1
        # which part failed, by status, in the metrics and across a resume
        assert buf.metrics()["buffer/failed/reward_failed"] == 1.0
        again = TrajectoryBuffer([TaskShare("a", 1.0, 3)], groups_per_step=1, alpha=0)
        again.import_state(buf.export_state())
        assert again.metrics()["buffer/failed/reward_failed"] == 1.0
    asyncio.run(main())


def test_weighted_task_shares_and_resume_of_ticket_stream():
    async def main():
        shares = [TaskShare("a", 2.0, 2), TaskShare("b", 1.0, 2)]
        buf = TrajectoryBuffer(shares, groups_per_step=6, alpha=0, seed=3)
        tickets = [await buf.next_ticket() for _ in range(6)]
        assert [t.task for t in tickets].count("a") == 4
        state = buf.export_state()
        clone = TrajectoryBuffer(shares, groups_per_step=6, alpha=0, seed=99)
        clone.import_state(state)
        # the six open groups were not finished: the clone re-issues exactly them
        reissued = [await clone.next_ticket() for _ in range(6)]
        assert [(t.task, t.seed) for t in reissued] == [(t.task, t.seed) for t in tickets]
        # the run's totals go on (re-issued tickets count again: they are issued again)
        assert clone.counters.tickets_issued == buf.counters.tickets_issued + 6
    asyncio.run(main())


def test_next_tickets_hands_out_up_to_n_within_the_staleness_bound():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=3, alpha=0)
        first = await buf.next_tickets(2)
        rest = await buf.next_tickets(5)  # only one more fits this step
        assert [len(first), len(rest)] == [2, 1]
        assert len({t.group_id for t in first + rest}) == 3
        waiting = asyncio.ensure_future(buf.next_tickets(5))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # quota spent: waits like next_ticket
        await buf.stop()
        assert await asyncio.wait_for(waiting, 1) is None
        try:
            await buf.next_tickets(0)
        except ValueError as err:
            assert "n must be >= 1" in str(err)
        else:
            raise AssertionError("next_tickets(0) was accepted")
    asyncio.run(main())


def test_prepare_ahead_hands_out_the_next_step_held_and_opens_it_on_advance():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, alpha=0, prepare_ahead=True)
        now = await buf.next_tickets(5)
        assert [t.opens_at_step for t in now] == [0, 0]  # the step's own groups start at once
        held = asyncio.ensure_future(buf.next_tickets(5))
        await asyncio.sleep(0.05)
        assert not held.done()  # nothing is held out while the step's own groups still run
        for tk in now:
            for i in range(2):
                await buf.put(_traj(tk, i, 0, reward=float(i)))
        assert [t.opens_at_step for t in await asyncio.wait_for(held, 1)] == [1, 1]  # one step's worth
        beyond = asyncio.ensure_future(buf.next_tickets(5))
        opened = asyncio.ensure_future(buf.wait_step(1))
        await asyncio.sleep(0.05)
        assert not beyond.done() and not opened.done()  # no more than one step ahead; still closed
        assert len(await buf.get_batch(2, version=0)) == 2
        await buf.advance(1)
        assert await asyncio.wait_for(opened, 1) == 1  # the version the opened step is served at
        assert await buf.wait_step(1) == 1  # an open step answers at once
        late = asyncio.ensure_future(buf.wait_step(5))
        await buf.stop()
        assert await asyncio.wait_for(late, 1) is None  # stopped: it never opens
        assert await asyncio.wait_for(beyond, 1) is None
    asyncio.run(main())


def test_without_prepare_ahead_no_ticket_is_held():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, alpha=1)
        tickets = await buf.next_tickets(10)
        assert len(tickets) == 4 and all(t.opens_at_step == 0 for t in tickets)  # alpha = 1: two steps, open
    asyncio.run(main())


def test_resume_with_another_task_list_reissues_only_prompts_of_configured_tasks():
    """A resumed run may drop a task or change a group size: a saved prompt of a dropped task
    used to be issued anyway (no worker can play it), with the old group size."""
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2), TaskShare("b", 1.0, 2)], groups_per_step=4, alpha=0)
        saved = await buf.next_tickets(4)
        assert {t.task for t in saved} == {"a", "b"}
        clone = TrajectoryBuffer([TaskShare("a", 1.0, 4)], groups_per_step=4, alpha=0)
        clone.import_state(buf.export_state())
        reissued = await clone.next_tickets(4)
        assert [(t.task, t.seed) for t in reissued[:2]] == [(t.task, t.seed) for t in saved if t.task == "a"]
        assert all(t.task == "a" and t.group_size == 4 for t in reissued)
    asyncio.run(main())


def test_a_batch_taken_but_not_trained_is_saved_as_not_taken():
    """Ctrl-C between `get_batch` and the update: the checkpoint lost the batch's prompts
    (neither saved nor trained) and counted its trajectories as trained."""
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        buf = TrajectoryBuffer(shares, groups_per_step=2, alpha=0, seed=1)
        tickets = await _fill(buf, 0, 2)
        await buf.get_batch(2, version=0)
        clone = TrajectoryBuffer(shares, groups_per_step=2, alpha=0, seed=9)
        clone.import_state(buf.export_state(untrained=True))
        assert [(t.task, t.seed) for t in await clone.next_tickets(2)] == [(t.task, t.seed) for t in tickets]
        assert clone.counters.trajectories_trained == 0
        # once the step is taken (advance) the batch is trained: nothing to give back
        await buf.advance(1)
        after = buf.export_state(untrained=True)
        assert after["requeued"] == [] and after["counters"]["trajectories_trained"] == 4
    asyncio.run(main())


def test_a_batch_given_back_untrained_is_dealt_again_with_the_same_task_split():
    """The untrained save kept the task-mix credit the taken batch had advanced: the redone
    step was dealt the next step's split ({a: 2, b: 0} for {a: 1, b: 1})."""
    async def main():
        shares = [TaskShare("a", 2.0, 2), TaskShare("b", 1.0, 2)]
        buf = TrajectoryBuffer(shares, groups_per_step=2, alpha=0, seed=1)
        before = buf.export_state()["batch_credit"]
        await _fill(buf, 0, 2)
        await buf.get_batch(2, version=0)
        assert buf.export_state()["batch_credit"] != before  # the take dealt the split
        assert buf.export_state(untrained=True)["batch_credit"] == before  # given back: as before it
        await buf.advance(1)
        trained = buf.export_state(untrained=True)["batch_credit"]
        assert trained != before and trained == buf.export_state()["batch_credit"]
    asyncio.run(main())


def test_drop_no_signal_gives_a_tied_groups_place_to_a_fresh_prompt():
    """DAPO's dynamic sampling: a group of equal rewards is dropped and another prompt
    rolled out in its place, so the step trains on groups that carry a gradient."""
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, alpha=0, drop_no_signal=True)
        tied = await buf.next_ticket()
        for i in range(2):
            await buf.put(_traj(tied, i, 0, reward=0.0))  # both failed alike: advantage 0
        assert buf.counters.groups_dropped_no_signal == 1
        fresh = await asyncio.wait_for(buf.next_ticket(), 1)  # its place in the step is free again
        assert fresh.seed != tied.seed
        for i in range(2):
            await buf.put(_traj(fresh, i, 0, reward=float(i)))
        [group] = await buf.get_batch(1, version=0)
        assert [t.reward for t in group] == [0.0, 1.0]
        assert buf.metrics()["buffer/groups_dropped_no_signal"] == 1.0
    asyncio.run(main())


def test_drop_no_signal_stops_dropping_past_its_allowance_so_a_stuck_task_still_trains():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, alpha=0, drop_no_signal=True)
        for _ in range(3):  # NO_SIGNAL_OVERSAMPLE x groups_per_step drops ...
            tk = await asyncio.wait_for(buf.next_ticket(), 1)
            for i in range(2):
                await buf.put(_traj(tk, i, 0, reward=0.0))
        tk = await asyncio.wait_for(buf.next_ticket(), 1)
        for i in range(2):
            await buf.put(_traj(tk, i, 0, reward=0.0))
        [group] = await asyncio.wait_for(buf.get_batch(1, version=0), 1)  # ... then it is taken as it is
        assert buf.counters.groups_dropped_no_signal == 3 and group[0].seed == tk.seed
        await buf.advance(1)  # a new step: a new allowance
        tk = await asyncio.wait_for(buf.next_ticket(), 1)
        for i in range(2):
            await buf.put(_traj(tk, i, 1, reward=1.0))
        assert buf.counters.groups_dropped_no_signal == 4
    asyncio.run(main())


def test_without_drop_no_signal_a_tied_group_is_trained():
    async def main():
        buf = TrajectoryBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, alpha=0)
        tk = await buf.next_ticket()
        for i in range(2):
            await buf.put(_traj(tk, i, 0, reward=1.0))
        [group] = await buf.get_batch(1, version=0)
        assert len(group) == 2 and buf.counters.groups_dropped_no_signal == 0
    asyncio.run(main())
