import asyncio
import math

from roll_agentic.rollout.buffer import TaskShare
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from roll_agentic.rollout.trajectory import Trajectory


def _traj(ticket, i, status="ok", version=None):
    version = ticket.issued_version if version is None else version
    return Trajectory(f"{ticket.group_id}-{i}", ticket.group_id, ticket.task, ticket.seed, version,
                      token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0], reward=float(i % 2), status=status)


async def _drain_tickets(buf):
    out = []
    while buf._round_tickets:
        out.append(await buf.next_ticket())
    return out


def test_short_round_overprovisions_keeps_first_p0_and_queues_the_rest():
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 4)], groups_per_step=4, eta=1.25)
        tickets = await _drain_tickets(buf)
        assert len(tickets) == math.ceil(1.25 * 4) == 5
        assert all(t.group_size == 5 and t.keep == 4 and t.round_id == 0 for t in tickets)
        for t in tickets[:4]:  # four prompts finish first, each with its first 4 responses
            await buf.put_many([_traj(t, i) for i in range(4)])
        batch = await buf.get_batch(4, 0)
        assert [g[0].seed for g in batch] == [t.seed for t in tickets[:4]]
        assert all(len(g) == 4 for g in batch)
        assert buf.long_queue == [(tickets[4].task, tickets[4].seed)] or list(buf.long_queue) == [
            (tickets[4].task, tickets[4].seed)]
        assert buf._closed[0].is_set()  # workers abort the losing prompt's episodes
        await buf.put_many([_traj(tickets[4], 0)])  # late episode of the aborted prompt
        assert buf.tail["aborted_prompts"] == 1 and buf.tail["aborted_responses"] == 1
    asyncio.run(main())


def test_long_round_runs_exactly_p0_queued_prompts_without_overprovisioning():
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.5)
        queued: set[int] = set()
        for step in range(1, 10):
            tickets = await _drain_tickets(buf)
            if buf.round_kind == "long":
                assert len(tickets) == 2 and all(t.group_size == 2 and t.keep == 2 for t in tickets)
                assert {t.seed for t in tickets} <= queued
                return
            for t in tickets[:2]:
                await buf.put_many([_traj(t, i) for i in range(2)])
            await buf.get_batch(2, 0)
            queued |= {s for _, s in buf.long_queue}
            await buf.advance(step)
        raise AssertionError("no long round started")
    asyncio.run(main())


def test_round_kind_metric_describes_the_round_trained_not_the_next():
    # The trainer reads metrics after advance(), which has already opened the next round.
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.5)
        for step in range(1, 10):
            trained_kind = buf.round_kind
            tickets = await _drain_tickets(buf)
            for t in tickets[:2]:
                await buf.put_many([_traj(t, i) for i in range(2)])
            await buf.get_batch(2, 0)
            await buf.advance(step)
            assert buf.metrics()["tail/round_is_long"] == float(trained_kind == "long")
            if trained_kind == "long":
                assert buf.round_kind == "short"  # the next round differs: the metric did not follow it
                return
        raise AssertionError("no long round ran")
    asyncio.run(main())


def test_extra_responses_beyond_r0_are_not_trained():
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, eta=2.0)
        [t, *_] = await _drain_tickets(buf)
        await buf.put_many([_traj(t, i) for i in range(3)])  # three came back, R0 = 2
        [group] = await buf.get_batch(1, 0)
        assert len(group) == 2 and buf.tail["extra_responses"] == 1
    asyncio.run(main())


def test_long_queue_survives_a_checkpoint():
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.5, seed=4)
        tickets = await _drain_tickets(buf)
        for t in tickets[:2]:
            await buf.put_many([_traj(t, i) for i in range(2)])
        await buf.get_batch(2, 0)
        state = buf.export_state()
        clone = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.5, seed=99)
        clone.import_state(state)
        assert list(clone.long_queue) == list(buf.long_queue) and clone.long_queue
        # the run's totals go on from the checkpoint; the round in progress is counted once
        assert clone.tail == buf.tail and clone.round_kind == buf.round_kind
        assert clone.counters.groups_completed == buf.counters.groups_completed == 2
    asyncio.run(main())


def test_responses_have_their_own_overprovisioning():
    """eta_responses=1: prompts still race, but every response of a kept prompt counts."""
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 8)], groups_per_step=4, eta=1.25, eta_responses=1.0)
        tickets = await _drain_tickets(buf)
        assert len(tickets) == 5
        assert all(t.group_size == 8 and t.keep == 8 for t in tickets)
        paper = TailBatchingBuffer([TaskShare("a", 1.0, 8)], groups_per_step=4, eta=1.25)  # the paper: both 1.25
        assert all(t.group_size == 10 and t.keep == 8 for t in await _drain_tickets(paper))
    asyncio.run(main())


async def _to_long_round(buf, slow: str, step: int = 1, drain: bool = True) -> list:
    """Short rounds where every `slow` prompt loses the race, until a long round opens; its
    tickets (none issued when not `drain`)."""
    p0 = buf.groups_per_step
    while buf.round_kind != "long":
        tickets = await _drain_tickets(buf)
        winners = sorted(tickets, key=lambda t: t.task == slow)[:p0]  # the fast task's prompts finish first
        for t in winners:
            await buf.put_many([_traj(t, i) for i in range(t.keep)])
        await buf.get_batch(p0, 0)
        await buf.advance(step)
        step += 1
    return await _drain_tickets(buf) if drain else []


def test_a_long_round_also_runs_the_tasks_its_queue_lacks():
    async def main():
        shares = [TaskShare("slow", 1.0, 2), TaskShare("fast", 1.0, 2)]
        buf = TailBatchingBuffer(shares, groups_per_step=4, eta=2.0, eta_responses=1.0)
        tickets = await _to_long_round(buf, "slow")
        queued = [t for t in tickets if t.task == "slow"]
        fill = [t for t in tickets if t.task == "fast"]
        assert len(queued) == 4 and len(fill) == 2  # fast's share of P0 = 4 x 1/2
        assert all(t.group_size == t.keep == 2 for t in tickets)  # kept whole, like the queued prompts
        for t in tickets[:-1]:
            await buf.put_many([_traj(t, i) for i in range(2)])
        assert not buf._closed[buf.round_id].is_set()  # the round waits for its fill prompts too
        await buf.put_many([_traj(tickets[-1], i) for i in range(2)])
        batch = await buf.get_batch(4, 0)
        assert len(batch) == 6 and {g[0].task for g in batch} == {"slow", "fast"}
        assert buf.metrics()["tail/fill_prompts"] == 2.0
    asyncio.run(main())


def test_fill_is_off_on_request_and_has_nothing_to_do_for_one_task():
    async def main():
        shares = [TaskShare("slow", 1.0, 2), TaskShare("fast", 1.0, 2)]
        off = TailBatchingBuffer(shares, groups_per_step=4, eta=2.0, eta_responses=1.0, fill_tasks=False)
        assert [t.task for t in await _to_long_round(off, "slow")] == ["slow"] * 4
        one = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.5)
        assert len(await _to_long_round(one, "a")) == 2 and one.tail["fill_prompts"] == 0
    asyncio.run(main())


def test_a_round_whose_groups_all_fail_ends_the_run_instead_of_waiting_for_ever():
    """A bad env or a reward service that is down fails every episode: the async buffer
    raised, and tail batching's round waited for ever (no error, a hung run)."""
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 4)], groups_per_step=2, eta=1.0)
        for _ in range(buf.max_failed_in_a_row):
            t = await buf.next_ticket()
            await buf.put_many([_traj(t, i, status="env_failed") for i in range(t.group_size)])
        assert buf.counters.groups_dropped_failed == buf.max_failed_in_a_row
        buf.max_failing_s = 0.0  # as if they had failed for the 300 s a restart may take
        for wait in (buf.get_batch(2, 0), buf.take_ready(0)):
            try:
                await asyncio.wait_for(wait, 2)
            except RuntimeError as e:
                assert "groups in a row failed" in str(e)
            else:
                raise AssertionError("no error")
    asyncio.run(main())


def test_a_resume_runs_the_long_round_its_deferred_prompts_were_waiting_for():
    """Checkpoints are taken after `advance`, i.e. with the next round open. When that was a
    long round, a resume raced its deferred prompts again in an over-provisioned short round
    (cut off and deferred again) beside fresh prompts, instead of running them to the end."""
    async def main():
        shares = [TaskShare("slow", 1.0, 2), TaskShare("fast", 1.0, 2)]
        buf = TailBatchingBuffer(shares, groups_per_step=4, eta=2.0, eta_responses=1.5, seed=5)
        await _to_long_round(buf, "slow", drain=False)
        expected = sorted((t.task, t.seed) for t in buf._round_tickets)
        # mid-round: one group done (ready), one issued and open, the rest not handed out
        done, _open = await buf.next_ticket(), await buf.next_ticket()
        await buf.put_many([_traj(done, i) for i in range(2)])
        state = buf.export_state()
        clone = TailBatchingBuffer(shares, groups_per_step=4, eta=2.0, eta_responses=1.5, seed=77)
        clone.import_state(state)
        assert clone.round_kind == "long"
        resumed = await _drain_tickets(clone)
        assert sorted((t.task, t.seed) for t in resumed) == expected  # deferred and fill prompts, none new
        assert all(t.group_size == t.keep == 2 for t in resumed)  # no over-provisioning, no cut-off
        assert clone.tail["rounds_long"] == buf.tail["rounds_long"]  # the round is counted once
        for t in resumed:
            await clone.put_many([_traj(t, i) for i in range(2)])
        assert len(await clone.get_batch(4, 0)) == len(expected) and not clone.long_queue
        await clone.advance(clone.state.version + 1)
        assert clone.round_kind == "short"
    asyncio.run(main())


def _interrupted(buf, shares, **kw):
    """A resume from the checkpoint of a run stopped before its step's update."""
    clone = TailBatchingBuffer(shares, groups_per_step=buf.groups_per_step, seed=123, **kw)
    clone.import_state(buf.export_state(untrained=True))
    return clone


def test_a_short_round_interrupted_while_streaming_reissues_every_prompt():
    """Ctrl-C mid-round: the groups streamed so far (take_ready) were in neither the
    checkpoint nor the weights, so a resume never ran their prompts, and counted them trained."""
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        kw = {"eta": 1.5, "eta_responses": 1.0}
        buf = TailBatchingBuffer(shares, groups_per_step=4, **kw)
        tickets = await _drain_tickets(buf)  # six prompts race for four places
        for t in tickets[:2]:
            await buf.put_many([_traj(t, i) for i in range(2)])
        taken, closed = await buf.take_ready(0)  # streamed, gradients accumulated
        assert len(taken) == 2 and not closed
        await buf.put_many([_traj(tickets[2], i) for i in range(2)])  # ready, not taken yet; three open
        clone = _interrupted(buf, shares, **kw)
        resumed = await _drain_tickets(clone)
        assert sorted((t.task, t.seed) for t in resumed) == sorted((t.task, t.seed) for t in tickets)
        assert clone.counters.trajectories_trained == 0
        assert clone.tail["rounds_short"] == 1 and clone.round_id == 0
    asyncio.run(main())


def test_a_closed_short_round_interrupted_before_its_update_runs_again():
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        kw = {"eta": 1.5, "eta_responses": 1.0}
        buf = TailBatchingBuffer(shares, groups_per_step=2, **kw)
        tickets = await _drain_tickets(buf)
        for t in tickets[:2]:
            await buf.put_many([_traj(t, i) for i in range(2)])
        taken, closed = await buf.take_ready(0)
        assert len(taken) == 2 and closed and list(buf.long_queue) == [(tickets[2].task, tickets[2].seed)]
        clone = _interrupted(buf, shares, **kw)
        resumed = await _drain_tickets(clone)
        # the two finished prompts head the round again; the loser stays deferred, counted once
        assert [(t.task, t.seed) for t in resumed[:2]] == [(t.task, t.seed) for t in tickets[:2]]
        assert list(clone.long_queue) == list(buf.long_queue) and clone.tail["aborted_prompts"] == 1
        assert clone.counters.trajectories_trained == 0 and clone.tail["rounds_short"] == 1
    asyncio.run(main())


def test_a_long_round_interrupted_before_its_update_runs_again_counted_once():
    """A long round exists to finish its deferred prompts: one interrupted after it closed
    (every group streamed) lost them all, and its fill prompts were counted twice."""
    async def main():
        shares = [TaskShare("slow", 1.0, 2), TaskShare("fast", 1.0, 2)]
        kw = {"eta": 2.0, "eta_responses": 1.0}
        buf = TailBatchingBuffer(shares, groups_per_step=4, **kw)
        await _to_long_round(buf, "slow", drain=False)
        trained, fill_before = buf.counters.trajectories_trained, buf.tail["fill_prompts"]
        tickets = await _drain_tickets(buf)
        assert len(tickets) == 6  # four deferred, two fill
        for t in tickets:
            await buf.put_many([_traj(t, i) for i in range(2)])
        taken, closed = await buf.take_ready(0)
        assert len(taken) == 6 and closed
        clone = _interrupted(buf, shares, **kw)
        assert clone.round_kind == "long" and clone.counters.trajectories_trained == trained
        resumed = await _drain_tickets(clone)
        assert sorted((t.task, t.seed) for t in resumed) == sorted((t.task, t.seed) for t in tickets)
        for t in resumed:
            await clone.put_many([_traj(t, i) for i in range(2)])
        assert len(await clone.get_batch(4, 0)) == 6
        await clone.advance(clone.state.version + 1)
        assert clone.tail["fill_prompts"] == fill_before + 2  # the round's fill, counted once
        assert clone.tail["rounds_long"] == buf.tail["rounds_long"] == 1
        assert clone.counters.trajectories_trained == trained + 12
    asyncio.run(main())


def test_a_prompt_that_never_fits_is_replaced_not_rolled_for_ever():
    """A group whose first prompt leaves no room to reply (prompt_too_long) was rolled again
    with the same seed: it failed every time and its round never closed (the run ended after
    five minutes of failures). As in the plain buffer, a fresh prompt takes its place."""
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=2, eta=1.0, fill_tasks=False)
        fits, too_long = await buf.next_tickets(2)
        await buf.put_many([_traj(fits, i) for i in range(2)])
        await buf.put_many([_traj(too_long, i, "prompt_too_long") for i in range(2)])
        [fresh] = await buf.next_tickets(1)
        assert fresh.task == "a" and fresh.seed != too_long.seed and fresh.round_id == 0
        await buf.put_many([_traj(fresh, i) for i in range(2)])
        assert buf._closed[0].is_set()
        batch = await buf.get_batch(2, 0)
        assert sorted(g[0].seed for g in batch) == sorted([fits.seed, fresh.seed])
        assert buf.failures == {"prompt_too_long": 2}

        # A long round's prompts are saved by a checkpoint: it names the replacement.
        buf.long_queue.extend([("a", 11), ("a", 12)])  # two prompts deferred by earlier rounds
        await buf.advance(1)
        assert buf.round_kind == "long"
        tickets = await _drain_tickets(buf)
        bad = next(t for t in tickets if t.seed == 12)
        await buf.put_many([_traj(bad, i, "prompt_too_long") for i in range(2)])
        [fresh] = await buf.next_tickets(1)
        assert fresh.seed != 12 and fresh.keep == 2
        assert buf.export_state()["long_queue"] == [["a", 11], ["a", fresh.seed]]
    asyncio.run(main())


def test_episodes_on_weights_older_than_their_round_are_stale_not_trained():
    """An engine that missed a weight sync serves the round's prompts with older weights:
    those episodes were trained as fresh (alpha is 0 here). They are counted stale and
    the prompt is rolled again."""
    async def main():
        buf = TailBatchingBuffer([TaskShare("a", 1.0, 2)], groups_per_step=1, eta=1.0)
        await _drain_tickets(buf)
        await buf.advance(3)
        (ticket,) = await _drain_tickets(buf)
        assert ticket.issued_version == 3
        await buf.put_many([_traj(ticket, i, version=1) for i in range(2)])
        assert not buf._ready and buf.failures == {"stale": 2}
        (again,) = await _drain_tickets(buf)  # the same prompt, rolled again
        assert (again.task, again.seed) == (ticket.task, ticket.seed)
        await buf.put_many([_traj(again, i) for i in range(2)])
        batch = await buf.get_batch(1, 3)
        assert [t.min_version for t in batch[0]] == [3, 3]
    asyncio.run(main())


def test_carried_prompts_no_worker_took_before_the_round_closed_run_in_the_next_round():
    """A resume's requeued prompts are issued first; those still unissued when the round's
    P0 groups finished were cleared with the round and lost for good."""
    async def main():
        shares = [TaskShare("a", 1.0, 2)]
        kw = {"eta": 1.5, "eta_responses": 1.0}
        state = TailBatchingBuffer(shares, groups_per_step=2, **kw).export_state()
        state["requeued"] = [{"task": "a", "seed": 1000 + i, "group_size": 2} for i in range(5)]
        buf = TailBatchingBuffer(shares, groups_per_step=2, seed=7, **kw)
        buf.import_state(state)
        first = [await buf.next_ticket() for _ in range(2)]  # the round holds three; two are taken
        for t in first:
            await buf.put_many([_traj(t, i) for i in range(2)])
        taken, closed = await buf.take_ready(0)
        assert closed and [t.seed for t in first] == [1000, 1001]
        saved = buf.export_state(untrained=True)  # a checkpoint now has the carried ones too
        assert {1002, 1003, 1004} <= {r["seed"] for r in saved["requeued"]}
        await buf.advance(1)
        second = await _drain_tickets(buf)
        assert [t.seed for t in second] == [1002, 1003, 1004]
    asyncio.run(main())
