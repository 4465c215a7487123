"""Tail batching resumed with another `groups_per_step` (P0): the checkpoint's long round
was sized for the old P0. A resume whose first round came out short (P0 grew past the
saved long queue) dropped that round's fill prompts: they were never issued again."""

import asyncio
import logging
from collections import Counter

import pytest

from roll_agentic.rollout.buffer import TaskShare
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from tests.rollout.test_tail_batching import _drain_tickets, _to_long_round, _traj

SHARES = [TaskShare("slow", 1.0, 2), TaskShare("fast", 1.0, 2)]
KW = {"eta": 2.0, "eta_responses": 1.0}

Prompt = tuple[str, int]


async def _saved_long_round(untrained: bool) -> tuple[TailBatchingBuffer, dict]:
    """A P0 = 4 run checkpointed in its long round (four deferred prompts, two fill):
    mid-round (one group ready, one open), or closed and streamed but not trained."""
    buf = TailBatchingBuffer(SHARES, groups_per_step=4, seed=3, **KW)
    await _to_long_round(buf, "slow", drain=False)
    assert buf.round_kind == "long" and len(buf._round_fill) == 2
    if untrained:
        tickets = await _drain_tickets(buf)
        for t in tickets:
            await buf.put_many([_traj(t, i) for i in range(t.keep)])
        _, closed = await buf.take_ready(0)
        assert closed
    else:
        done, _open = await buf.next_ticket(), await buf.next_ticket()
        await buf.put_many([_traj(done, i) for i in range(done.keep)])
    return buf, buf.export_state(untrained=untrained)


def _saved_prompts(state: dict) -> list[Prompt]:
    """Every prompt the checkpoint holds untrained: deferred, fill and requeued."""
    return ([(task, seed) for task, seed in state["long_queue"]]
            + [(task, seed) for task, seed in state.get("round_fill", [])]
            + [(r["task"], r["seed"]) for r in state["requeued"]])


async def _run(buf: TailBatchingBuffer, saved: set[Prompt], max_rounds: int = 30):
    """Rounds in which every issued group finishes, in issue order, until every saved prompt
    was trained (or `max_rounds`): prompts issued, trained, and fill prompts trained."""
    issued: Counter[Prompt] = Counter()
    trained: Counter[Prompt] = Counter()
    fill = 0
    for _ in range(max_rounds):
        if saved <= set(trained):
            break
        p0, kind = buf.groups_per_step, buf.round_kind
        tickets = await _drain_tickets(buf)
        issued.update((t.task, t.seed) for t in tickets)
        for t in tickets:  # groups after the round closed are aborted (and deferred)
            await buf.put_many([_traj(t, i) for i in range(t.keep)])
        batch = await buf.get_batch(p0, buf.state.version)
        trained.update((g[0].task, g[0].seed) for g in batch)
        fill += len(batch) - p0 if kind == "long" else 0
        await buf.advance(buf.state.version + 1)
    return issued, trained, fill


@pytest.mark.parametrize("untrained", [False, True], ids=["mid_round", "closed_untrained"])
@pytest.mark.parametrize("new_p0", ["same", "smaller", "larger"])
def test_a_resume_with_another_round_size_trains_every_saved_prompt_once(new_p0, untrained, caplog):
    async def main():
        buf, state = await _saved_long_round(untrained)
        p0 = {"same": 4, "smaller": 2, "larger": len(state["long_queue"]) + 1}[new_p0]
        clone = TailBatchingBuffer(SHARES, groups_per_step=p0, seed=77, **KW)
        rounds_before = clone.tail["rounds_short"] + clone.tail["rounds_long"]
        with caplog.at_level(logging.INFO, logger="roll_agentic.rollout.tail_batching"):
            clone.import_state(state)
        saved = _saved_prompts(state)
        assert len(saved) == len(set(saved))
        opened = buf.tail["rounds_short"] + buf.tail["rounds_long"]
        assert clone.tail["rounds_short"] + clone.tail["rounds_long"] == opened != rounds_before
        issued, trained, fill = await _run(clone, set(saved))
        assert {p: trained[p] for p in saved} == dict.fromkeys(saved, 1)  # none dropped, none twice
        assert {p: issued[p] for p in saved} == dict.fromkeys(saved, 1)  # each issued once, never raced
        assert max(trained.values()) == 1
        # the fill prompts counted are those trained in long rounds since the checkpoint
        assert clone.tail["fill_prompts"] == state["tail"]["fill_prompts"] + fill
        steps = clone.state.steps_taken - state["steps_taken"]
        assert clone.tail["rounds_short"] + clone.tail["rounds_long"] == opened + steps
        # a resume at another round size says so (and one at the same size does not)
        assert ("groups_per_step" in caplog.text) == (new_p0 != "same")
    asyncio.run(main())


def test_a_smaller_round_takes_its_fill_from_the_saved_fill_first():
    """P0 4 -> 2: the first long round runs two deferred prompts; its fill is its own share
    (one `fast` prompt), the saved round's, and the other saved fill prompt is re-issued
    first in the next short round rather than dropped or padding the long round."""
    async def main():
        _, state = await _saved_long_round(untrained=False)
        saved_fill = [tuple(x) for x in state["round_fill"]]
        clone = TailBatchingBuffer(SHARES, groups_per_step=2, seed=77, **KW)
        clone.import_state(state)
        assert clone.round_kind == "long"
        tickets = await _drain_tickets(clone)
        assert [(t.task, t.seed) for t in tickets] == [tuple(x) for x in state["long_queue"][:2]] + saved_fill[:1]
        assert [(t.task, t.seed) for t in clone._requeued] == saved_fill[1:]
    asyncio.run(main())


def test_a_larger_round_that_comes_out_short_reissues_the_saved_fill_first():
    async def main():
        _, state = await _saved_long_round(untrained=False)
        clone = TailBatchingBuffer(SHARES, groups_per_step=len(state["long_queue"]) + 1, seed=77, **KW)
        clone.import_state(state)
        assert clone.round_kind == "short"
        assert [tuple(x) for x in clone.long_queue] == [tuple(x) for x in state["long_queue"]]
        tickets = await _drain_tickets(clone)
        head = [(t.task, t.seed) for t in tickets[:2]]
        assert head == [tuple(x) for x in state["round_fill"]]
    asyncio.run(main())


@pytest.mark.parametrize("untrained", [False, True], ids=["mid_round", "closed_untrained"])
def test_a_resume_without_one_of_the_tasks_runs_on_without_its_prompts(untrained):
    """A task taken out of the config on resume: its deferred and fill prompts have no worker
    to play them (a ticket for it raised KeyError), so they are left out; the others run."""
    async def main():
        _, state = await _saved_long_round(untrained)
        assert {task for task, _ in _saved_prompts(state)} == {"slow", "fast"}
        clone = TailBatchingBuffer([TaskShare("fast", 1.0, 2)], groups_per_step=4, seed=5, **KW)
        clone.import_state(state)
        assert all(task == "fast" for task, _ in clone.long_queue)
        saved_fast = {p for p in _saved_prompts(state) if p[0] == "fast"}
        issued, trained, _ = await _run(clone, saved_fast)
        assert all(task == "fast" for task, _ in issued)
        assert saved_fast <= set(trained)

    asyncio.run(main())
