"""Banked SLO slack: the slowdown the rest of a running job's run may take.

A job's SLO bounds its whole run: it attains it when its time from arrival
to the end of its last iteration is within SLO x the same iterations run
alone. Placement checks hold every member to its SLO at every
meta-iteration, so a job that has run faster than that (alone for a while,
or in a group paced by a tighter member) ends well inside its SLO, and the
slack it did not use buys nothing. Banked, it lets the job's remaining
iterations run slower, which gives its group room for another member.

The simulator (with `RollMuxPolicy.bank_slack`) re-profiles a running
job's SLO as `remaining_slo` says at the iteration ends where it looks at
the job anyway (alone, or its group changed); every check then works
unchanged on the new target. The others keep theirs: a job that runs
within its target never needs a lower one (an iteration at the pace the
target allows leaves the next target at least as high). The headroom
placement keeps back is charged on the time already spent too, so the
whole run, not only its rest, keeps the margin. Not in the paper, which
holds each iteration to the SLO.
"""

from __future__ import annotations

# A job's target never rises beyond this multiple of its SLO: with a few
# iterations left, banked slack divided by them would allow any slowdown,
# and a long phase there could still overrun it.
MAX_SLO_FACTOR = 2.0


def remaining_slo(
    slo: float,
    planned_iter_s: float,
    elapsed_s: float,
    solo_done_s: float,
    iters_left: int,
    headroom: float,
) -> float:
    """SLO target for a job's remaining iterations, given how far it has come.

    `elapsed_s`: time since its arrival; `solo_done_s`: how long the
    iterations it completed take alone; its remaining ones are taken to
    take `planned_iter_s` alone. If each remaining iteration runs at a
    period within the returned target (with `headroom`, as placement checks
    it), the run ends within SLO x its solo time, headroom kept. A job ahead
    of its SLO gets more than `slo` (at most `MAX_SLO_FACTOR` times it); one
    behind gets less, down to 1 (no slowdown at all).
    """
    if iters_left <= 0:
        return slo
    rest_s = iters_left * planned_iter_s
    allowed_s = slo * (solo_done_s + rest_s) - (1.0 + headroom) * elapsed_s
    return min(MAX_SLO_FACTOR * slo, max(1.0, allowed_s / rest_s))
