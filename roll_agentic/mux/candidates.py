"""The placements a job could take, and the checks of one candidate.

A group of its own (its solo allocation); the paper's pack and
add-rollout kinds in an existing group (`group_candidates`, which the
baselines and admission use; RollMux ranks the same kinds from its cached
views, `placement.py`); the rollout node counts a job may run on
(`rollout_options`); and the host-memory and SLO checks of one candidate.
"""

from __future__ import annotations

from collections.abc import Mapping

from roll_agentic.mux.group import CandidateKind, Group, Placement, other_form
from roll_agentic.mux.profile import ClusterSpec, JobProfile, PhaseTimes, Pool, phase_times, planned
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on, members_of
from roll_agentic.mux.slo_check import lone_slo_ok, slo_periods_ok


def new_group_placement(job: JobProfile, spec: ClusterSpec, n_rollout: int | None = None) -> Placement:
    """A group of the job's own: its training nodes and `n_rollout` rollout nodes (default: its own count)."""
    n_rollout = job.n_rollout if n_rollout is None else n_rollout
    return Placement(
        CandidateKind.NEW_GROUP,
        None,
        new_rollout=n_rollout,
        new_train=job.n_train,
        extra_cost_per_hour=n_rollout * spec.price(Pool.ROLLOUT) + job.n_train * spec.price(Pool.TRAIN),
    )


def rollout_options(
    job: JobProfile, spec: ClusterSpec, headroom: float, extra_train: int = 0
) -> list[tuple[int, PhaseTimes]]:
    """Rollout node counts the job may run on, its own first, each with its planned times.

    With `spec.rollout_shrink`, also fewer nodes (a longer rollout), down to
    one, as long as the job alone could still keep its SLO: no group runs
    it faster than alone, so fewer would fail every SLO check. `extra_train`:
    it trains on that many training nodes beyond its own count (a shorter
    training phase; `RollMuxPolicy.scale_train`).
    """
    out = []
    n_train = job.n_train + extra_train
    for n in range(job.n_rollout, 0 if spec.rollout_shrink else job.n_rollout - 1, -1):
        t = planned(phase_times(job, n, n_train, False, spec), job)
        if n == job.n_rollout or lone_slo_ok(MemberPlan(t, (), ()), job, headroom):
            out.append((n, t))
    return out


def node_loads(group: Group, spec: ClusterSpec) -> dict[int, float]:
    """Planned phase seconds per meta-iteration on each node of the group."""
    load = {nid: 0.0 for nid in group.nodes}
    for job_id, pin in group.pinning.items():
        t = group.planned_times(job_id, spec)
        for nid in pin.nodes_for(Pool.ROLLOUT):
            load[nid] += t.roll_node_s
        for nid in pin.train_nodes:
            load[nid] += t.train_s
    return load


def memory_ok(group: Group, job: JobProfile, placement: Placement) -> bool:
    """Does the job's state fit the free host memory of every node it would use?"""
    for nid in placement.rollout_nodes:
        if group.nodes[nid].mem_free_gb < job.rollout_mem_gb:
            return False
    for nid in placement.train_nodes:
        if group.nodes[nid].mem_free_gb < job.train_mem_gb:
            return False
    return True


def _with_job(group: Group, job: JobProfile, p: Placement, spec: ClusterSpec) -> list[MemberPlan]:
    """The group's members plus `job` pinned as `p`; new nodes get fresh ids."""
    fresh = max(group.nodes, default=0) + 1
    rollout = p.rollout_nodes + tuple(range(fresh, fresh + p.new_rollout))
    fresh += p.new_rollout
    train = p.train_nodes + tuple(range(fresh, fresh + p.new_train))
    t = planned(phase_times(job, len(rollout), len(train), False, spec), job)
    return [*members_of(group, spec), MemberPlan(t, rollout, train)]


def slo_ok(
    group: Group,
    job: JobProfile,
    placement: Placement,
    spec: ClusterSpec,
    headroom: float = 0.0,
) -> bool:
    """Would every member, the newcomer included, keep its SLO in round robin?"""
    plans = _with_job(group, job, placement, spec)
    return slo_periods_ok(evaluate_on(plans, spec), [*group.members.values(), job], headroom)


def _pack_or_add_rollout(
    group: Group, job: JobProfile, spec: ClusterSpec, train: list[int], rollout: list[int]
) -> list[Placement]:
    """Reuse the least-loaded rollout nodes, adding 0..n_rollout new ones (new ones cost)."""
    out: list[Placement] = []
    for k_new in range(job.n_rollout + 1):
        reuse = job.n_rollout - k_new
        if reuse > len(rollout):
            continue
        out.append(
            Placement(
                CandidateKind.PACK if k_new == 0 else CandidateKind.ADD_ROLLOUT,
                group.group_id,
                rollout_nodes=tuple(rollout[:reuse]),
                train_nodes=tuple(train[: job.n_train]),
                new_rollout=k_new,
                extra_cost_per_hour=k_new * spec.price(Pool.ROLLOUT),
            )
        )
    return out


def group_candidates(
    group: Group, job: JobProfile, spec: ClusterSpec, load: Mapping[int, float] | None = None
) -> list[Placement]:
    """Pack and add-rollout candidates for one group (memory-feasible pinnings; none for a
    group of another trainer form)."""
    if any(p.colocated for p in group.pinning.values()) or other_form(group, job.form):
        return []
    load = load if load is not None else node_loads(group, spec)

    def least_loaded(pool: Pool, mem: float) -> list[int]:
        ids = [n.node_id for n in group.nodes.values() if n.pool is pool and n.mem_free_gb >= mem]
        return sorted(ids, key=lambda nid: (load[nid], nid))

    train = least_loaded(Pool.TRAIN, job.train_mem_gb)
    rollout = least_loaded(Pool.ROLLOUT, job.rollout_mem_gb)
    if len(train) < job.n_train:
        return []
    return _pack_or_add_rollout(group, job, spec, train, rollout)
