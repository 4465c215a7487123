"""One prompt that always fails no longer holds its slot for good, or stops the run."""

import asyncio

from roll_agentic.rollout.buffer import TaskShare, TrajectoryBuffer
from roll_agentic.rollout.prompt_retries import MAX_ATTEMPTS, PromptRetries
from roll_agentic.rollout.tail_batching import TailBatchingBuffer
from tests.rollout.test_buffer import _traj

WAIT_S = 5.0  # every wait here is bounded


def _failed(ticket, i, deterministic=True):
    t = _traj(ticket, i, 0, reward=None, status="env_failed")
    t.error, t.deterministic = "KeyError: 'row 7 has no answer'", deterministic
    return t


async def _serve(buf, bad_seeds: set[int], deterministic: bool, issued: list[int]) -> None:
    """A worker: the first prompt it is given fails on every episode, every other one scores 0 and 1."""
    while True:
        tickets = await buf.next_tickets(4)
        if not tickets:
            return
        for tk in tickets:
            issued.append(tk.seed)
            if not bad_seeds:
                bad_seeds.add(tk.seed)
            episodes = tk.group_size
            if tk.seed in bad_seeds:
                await buf.put_many([_failed(tk, i, deterministic) for i in range(episodes)])
            else:
                await buf.put_many([_traj(tk, i, 0, reward=float(i % 2)) for i in range(episodes)])


def _first_batch(buf, deterministic: bool) -> tuple[list, list[int], int]:
    async def main():
        bad: set[int] = set()
        issued: list[int] = []
        worker = asyncio.create_task(_serve(buf, bad, deterministic, issued))
        try:
            batch = await asyncio.wait_for(buf.get_batch(4, 0), WAIT_S)
        finally:
            await buf.stop()
            await asyncio.wait_for(worker, WAIT_S)
        return batch, issued, next(iter(bad))

    return asyncio.run(main())


def test_a_prompt_the_tasks_code_always_fails_on_is_replaced_not_rolled_for_ever():
    """With alpha=0 a batch waits for its four groups: the bad prompt, rolled again with the
    same seed, failed 16 times in a row and stopped the run ("every episode ... failed")."""
    buf = TrajectoryBuffer([TaskShare("t", 1.0, 2)], groups_per_step=4, alpha=0)
    batch, issued, bad = _first_batch(buf, deterministic=True)
    assert len(batch) == 4 and bad not in {g[0].seed for g in batch}
    assert issued.count(bad) == 1  # the task's own error: a re-roll meets it again
    assert buf.counters.prompts_replaced == 1 and buf.metrics()["buffer/prompts_replaced"] == 1.0


def test_a_prompt_failing_for_a_passing_cause_is_rolled_again_then_replaced():
    buf = TrajectoryBuffer([TaskShare("t", 1.0, 2)], groups_per_step=4, alpha=0)
    batch, issued, bad = _first_batch(buf, deterministic=False)
    assert len(batch) == 4 and issued.count(bad) == MAX_ATTEMPTS
    assert buf.counters.prompts_replaced == 1


def test_a_tail_round_replaces_a_prompt_that_fails_for_good():
    """A tail-batching round waits for every prompt it holds: one that always failed never let
    it close."""
    buf = TailBatchingBuffer([TaskShare("t", 1.0, 2)], groups_per_step=4, eta=1.0)
    batch, issued, bad = _first_batch(buf, deterministic=True)
    assert len(batch) == 4 and bad not in {g[0].seed for g in batch} and issued.count(bad) == 1
    assert buf.counters.prompts_replaced == 1


def test_a_success_forgets_the_prompts_failed_attempts():
    retries = PromptRetries()
    assert not retries.replace("t", 7, [])  # a failure that may pass: rolled again
    retries.succeeded("t", 7)
    assert retries.attempts == {}
    assert [retries.replace("t", 7, []) for _ in range(MAX_ATTEMPTS)] == [False] * (MAX_ATTEMPTS - 1) + [True]
    assert retries.attempts == {}  # dropped with its prompt
