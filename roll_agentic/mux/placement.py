"""Inter-group placement of an arriving job (RollMux, MECHANISMS.md section 2).

On arrival, with the job's conservative (worst-case) profile:
1. skip groups with no room left: the busiest node's load per
   meta-iteration already exceeds the tightest SLO budget, the newcomer's
   included (every member runs once per meta-iteration, so that member
   could not keep its SLO). The paper skips saturated groups (T_load >=
   T_cycle), which is this test with every SLO at 1: members that tolerate
   a slowdown still have room up to their SLOs, and steps 4-5 judge it
   (slowdowns priced in);
2. per remaining group, build candidates: pack into the group's existing
   nodes (extra cost 0), or keep its training nodes and open k of the job's
   rollout nodes (k = 1..n_rollout; extra cost k rollout nodes); plus a new
   group of the job's own (its solo allocation). With
   `ClusterSpec.rollout_shrink` (default) each is also built with fewer
   rollout nodes than the job's own count, down to one, while its longer
   iteration alone still keeps its SLO (`rollout_options`);
3. memory check: the job's state must fit the free host memory of every
   existing node it would be pinned to (residency: switches stay warm);
4. SLO check: run the candidate group's round robin on the profiled phase
   times at their typical lengths (`profile.planned`: the worst case alone
   mis-states a ratio); every member k must keep T_k(co-run) <= SLO_k *
   T_k(solo), with a
   small `headroom` kept back for run-time variance the profile cannot see
   (queueing behind phases whose lengths vary from iteration to iteration);
5. take the feasible candidate that adds the least *effective* $/h: the
   group's cost times its members over their summed progress rates, after
   minus before (`group_view.effective_cost`), against the job's solo cost for a new
   group. The paper takes the cheapest feasible one; but a free pack that
   slows its group keeps every member's nodes longer, which can cost more
   than a rollout node opened to avoid it (`rate_aware=False`: the paper's
   rule). Candidates are simulated in order of a bound on their score
   (the newcomer can run no faster than its busiest node allows, the
   members no faster than now), and the search stops when none left can
   win.

Existing nodes are chosen least-loaded first, so a candidate per (group, k)
is one deterministic pinning, not a search.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from roll_agentic.mux.batch import SEED_ORDERS, BatchStep, PlaceFn, build_plan, search_batch
from roll_agentic.mux.candidate_rank import Options, Ranked, RankRules, rank_candidates
from roll_agentic.mux.candidates import new_group_placement, rollout_options
from roll_agentic.mux.floor_base import view_floor_base
from roll_agentic.mux.group import (
    CandidateKind,
    Group,
    GroupBook,
    Placement,
    other_form,
)
from roll_agentic.mux.group_view import (
    GroupView,
    Joined,
    effective_cost,
    rate_after_leaving,
    slo_budget,
    view_of,
)
from roll_agentic.mux.policy import RoundRobinPhases
from roll_agentic.mux.profile import ClusterSpec, JobProfile, Pool
from roll_agentic.mux.rehome import MoveOffer, Rehomer
from roll_agentic.mux.round_robin import MemberPlan, evaluate_on
from roll_agentic.mux.slo_check import progress_rate, slo_periods_ok
from roll_agentic.mux.trim import could_trim, own_rollout_nodes, trim_offer

# Kept back from every SLO for what plans on typical lengths cannot see: a
# meta-iteration lasts as long as its slowest phase, and phase lengths vary
# per iteration. With nodes taking turns (`round_robin.node_turn`) runs
# follow their plans. 3 % would cost 1.8 % less on seeds 0-4 but left a job
# up to 0.56 % past its SLO in 3 of 17 trace and option sets (4 %: none
# there, 1.2 % less); 5 % met every SLO in each, on 2,000 jobs too.
# Groups beyond five members keep more (`slo_check.group_headroom`).
SLO_HEADROOM = 0.05

# $/h below which two scores count as tied when a bound settles a candidate.
_TIE = 1e-6


@dataclass
class RollMuxPolicy(RoundRobinPhases):
    """SLO-feasible candidate of least effective cost (see the module docstring).

    A group may be saturated (a node loaded beyond the longest solo cycle)
    before or after a candidate: the SLO check alone decides whether the
    slowdown is tolerable, and the score prices it.
    """

    spec: ClusterSpec
    headroom: float = SLO_HEADROOM
    max_checks: int = 16  # SLO simulations per arrival before opening a new group
    screen: bool = True  # drop candidates the cycle estimate already rejects
    # Offer a job left alone on its training nodes (its partners finished)
    # to groups that gained room, between iterations; the simulator pays
    # the cold start of the move. Such a job pays for its dear nodes as if
    # solo otherwise. Not in the paper (it places on arrival only).
    # Measured on the 200-job trace (seed 0) with effective-cost choice:
    # $862/h without, $823/h with; SLOs all met there and on 2,000 jobs.
    regroup: bool = True
    # With regroup: offer every member a move, not only lone ones
    # (`rehome.py`); a move must save `move_margin` x the job's solo $/h. Off by
    # default: on the 200-job trace it takes seed 0 from $716.4/h to
    # $713.2/h (seeds 0-4: 1.62x -> 1.66x cheaper than solo), SLOs all met,
    # but 2,000 jobs then take 2.3 s of scheduler time in all, every
    # iteration end of every job looked at (0.72-0.77 s without), past the
    # 1 s budget.
    rehome: bool = False
    move_margin: float = 0.2
    # Beyond the paper's three kinds: let a job share any subset of a
    # group's nodes and open the rest in either pool (e.g. a 2-training-node
    # job joining a 1-training-node group). The brute-force optimum searches
    # this space; see sim/optimal.py for what it buys.
    share_any: bool = False
    # With share_any: the newcomer must share a training node (the dear
    # one); sharing only rollout nodes saves little and uses up room.
    share_train: bool = False
    # Choose among feasible candidates by effective cost (slowdowns priced
    # in); off: the paper's rule, the first (cheapest) feasible candidate.
    rate_aware: bool = True
    # Jobs that arrive at one instant (a sweep) are placed as a batch
    # (`batch.py`): placements tried per batch (plans x jobs; each plan is a
    # run of this policy over one order of the jobs); 0: one by one in
    # arrival order. On the 20 static instances of `sim optimality` (seed
    # 0) the plans went from within 1.45x of the optimum's (arrival order)
    # to within 1.005x, and the simulated runs from 1.15x to 1.008x.
    batch_budget: int = 3200
    # Groups of this many members take no more. Only `share_any` grows
    # groups this large (members pinned to different training nodes under
    # shared rollout nodes); beyond it every SLO check and move offer runs
    # a longer round robin for little: on the 200-job traces (seeds 0, 1)
    # with share_any and rehome, 6 gave $697/h and $724/h, no cap $703/h
    # and $729/h, and 2,000 jobs took less scheduler time.
    max_members: int = 6
    # Every this many hours, re-place the jobs of the groups that save least
    # (`replan_jobs`) from scratch (`replan_plan`) and move them between
    # iterations when that is cheaper by `replan_margin` (`sim/replan.py`;
    # 0: never). Not in the paper. Off by default for its scheduler time:
    # each re-plan places ~24 jobs, hundreds of times over a 2,000-job
    # trace (1.6 s of CPU in all, against the 1 s bar, on top of the rest).
    # Measured on the 200-job trace (seeds 0-4) at 12 h: 1.66-1.77x cheaper
    # than solo instead of 1.61-1.65x, SLOs all met.
    replan_every_h: float = 0.0
    replan_margin: float = 0.02
    # Placements a re-plan's batch search may try; 0: no search, one plan
    # (`replan_plan`: dearest first with `share_any` candidates, the best of
    # the search's ten seed plans in 34 of 78 re-plans, within 1.025x of the
    # best on average). `--replan 12` on seeds 0-4 and 2,000 jobs: 100 gave
    # 1.710x over solo at 10.3 s of re-plan CPU, 0 gives 1.703x at 1.5 s.
    replan_budget: int = 0
    # A re-plan re-places the jobs of the groups that save least over solo
    # (`sim/replan.worst_groups`), at least this many (0: every running
    # job): the well-packed groups rarely change, and a re-plan's cost no
    # longer grows with the cluster. Mean saving over solo on seeds 0-4
    # (`sim compare --seeds 0-4`) and re-plan CPU on 2,000 jobs
    # (`sim scale`), with `--rollout-fifo --share-any --rehome --replan 12`
    # and with `--replan 12` alone: every job, 1.784x / 28.8 s and
    # 1.689x / 18.9 s; 24, 1.781x / 14.9 s and 1.693x / 9.5 s; 16, 1.788x /
    # 9.1 s and 1.675x / 5.8 s; 8, 1.760x / 4.3 s (FIFO configuration).
    replan_jobs: int = 24
    # With `spec.rollout_shrink`, a member drops rollout nodes only it uses
    # once its group no longer needs them (`trim.py`), if that cuts the
    # group's effective cost by this share.
    trim_margin: float = 0.01
    # With `spec.rollout_shrink`: a group of its own on the fewest rollout
    # nodes that keep the job's SLO; batch plans try it, judged whole
    # (`place_batch`). Online it is a bet that partners come to fill the
    # slack. Before trims existed it made the 200-job trace (seeds 0-4)
    # 1.602x cheaper than solo against 1.560x, but a 30-job trace 2-6 %
    # dearer, and with training GPUs at 6x a rollout GPU's price; with
    # trims, which drop nodes once partners have come, it adds nothing
    # (1.609x either way, before trims could move rollouts onto partners'
    # nodes), so arrivals do not take it.
    shrink_alone: bool = False
    # Hold a running job to the slowdown its whole run can still take
    # (`slack.py`): the simulator re-targets its SLO, where it looks at the
    # job anyway (alone, or its group changed), once that moves by
    # `bank_step` of it. Not in the paper. Off by default for its scheduler
    # time: seeds 0-4 go from 1.622x to 1.648x over solo, SLOs all met, but
    # 2,000 jobs take 0.98 s against 0.72-0.77 s (lone jobs re-targeted at
    # every iteration end; eased targets send them looking again).
    bank_slack: bool = False
    bank_step: float = 0.02
    # A joining job may train on up to this many training nodes beyond its
    # own (opened for it; each adds `spec.scale_efficiency` of a node): its
    # shorter iteration no longer sets a faster partner's pace. Not in the
    # paper; off by default: a job left alone keeps the nodes unless moved
    # (seeds 0-4: 1.622x -> 1.615x over solo; with `rehome` 1.662x -> 1.725x;
    # with the five options above 1.82x -> 1.90x, seed 0 1.875x; SLOs met).
    # Memory is checked at the job's own per-node state on every node it
    # trains on: spread over more nodes it needs less, so the check errs safe.
    scale_train: int = 0
    name: str = "rollmux"
    _views: dict[int, GroupView] = field(default_factory=dict, repr=False)
    _groups: dict[int, Group] = field(default_factory=dict, repr=False)  # whose views we keep
    # The winning candidate's membership and progress rate, measured by its
    # SLO check: the group's next view needs no simulation of its own.
    _joined: dict[int, Joined] = field(default_factory=dict, repr=False)
    _rehomer: Rehomer = field(init=False, repr=False)
    _prices: tuple[float, float] = field(init=False, repr=False)  # $/h of a rollout, a training node
    _prune_at: int = field(default=16, repr=False)
    _own: dict[str, tuple[JobProfile, Placement, Options]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._rehomer = Rehomer(self.move_margin)
        self._prices = (self.spec.price(Pool.ROLLOUT), self.spec.price(Pool.TRAIN))

    def trim_offer(self, group: Group, job_id: str) -> tuple[int, ...]:
        """Rollout nodes member `job_id` of `group` should run on from now, between its
        iterations (`trim.py`); empty: keep its own."""
        own = own_rollout_nodes(group, job_id) if self.spec.rollout_shrink else []
        if not own:
            return ()  # nothing it could release
        job = group.members[job_id]
        _, by_extra = self._own_plan(job)
        # Its times on the training nodes it runs on (more than its own: `scale_train`).
        options = by_extra[len(group.pinning[job_id].train_nodes) - job.n_train]
        if not could_trim(group, job_id, own, {n for n, _ in options}):
            return ()  # before building the group's view: most looks end here
        view = self._group_view(group)
        return trim_offer(
            view, group, job_id, own, options, self.spec, self.headroom, self.trim_margin
        )

    def move_offer(self, groups: Mapping[int, Group], group: Group, job_id: str) -> MoveOffer:
        """Should member `job_id` of `group` move, between its iterations? (`rehome`)"""
        return self._rehomer.offer(self, groups, group, job_id)

    def _group_view(self, group: Group) -> GroupView:
        view = self._views.get(group.group_id)
        # Every change of members, pinning or turn order bumps the version;
        # the identity check keeps a view from a run with another book out.
        if view is None or view.version != group.version or self._groups.get(group.group_id) is not group:
            members = tuple(group.pinning)
            known = self._joined.pop(group.group_id, None)
            if known is not None and known.members == members:
                # Without the newcomer the group ran at its rate before: what it adds needs no run.
                view = view_of(group, self.spec, known.rate)
                view.rates_without[known.job_id] = known.rate_before
            else:
                rate = None
                if view is not None and self._groups.get(group.group_id) is group:
                    rate = rate_after_leaving(view, group.version, members)
                view = view_of(group, self.spec, rate)
            self._views[group.group_id] = view
            self._groups[group.group_id] = group
        elif view.targets != group.targets:  # only SLO targets moved (banked slack)
            view = replace(
                view, budget=slo_budget(group), targets=group.targets, known_rate=view.rate_if_known()
            )
            self._views[group.group_id] = view
        return view

    def _own_plan(self, job: JobProfile) -> tuple[Placement, Options]:
        """The job's group of its own, and its planned phase times per rollout
        node count, on its own training node count and on each up to `scale_train` more.

        A candidate's times depend only on how many nodes it gives the job,
        so these serve every candidate. Kept per job: a running job is
        offered moves again and again.
        """
        known = self._own.get(job.job_id)
        if known is not None and known[0] is job:
            return known[1], known[2]
        if len(self._own) >= 4096:
            self._own.clear()  # departed jobs' entries; the live ones are cheap to redo
        by_extra = [
            rollout_options(job, self.spec, self.headroom, extra) for extra in range(self.scale_train + 1)
        ]
        fallback = new_group_placement(job, self.spec, by_extra[0][-1][0] if self.shrink_alone else None)
        self._own[job.job_id] = (job, fallback, by_extra)
        return fallback, by_extra

    def shares_nothing(self, job: JobProfile) -> bool:
        """An SLO inside the headroom: `best` keeps the job alone, whatever the groups."""
        if not self.screen:
            return False
        # Trained on more nodes than its own, it runs faster than alone.
        fastest = self._own_plan(job)[1][-1][0][1].iter_s if self.scale_train else job.planned_iter_s
        return job.slo * job.planned_iter_s / (1.0 + self.headroom) < fastest

    def place(self, groups: Mapping[int, Group], job: JobProfile) -> Placement:
        placement, score = self.best(groups, job)
        if self.rehome:
            self._rehomer.placed(job.job_id, groups, score)
        return placement

    def place_batch(
        self, groups: Mapping[int, Group], jobs: list[JobProfile], budget: int | None = None
    ) -> list[BatchStep]:
        """Placements for jobs that arrived together, in the order to apply them
        (`batch.ScratchIds` maps the new groups' and nodes' ids). `budget`:
        placements the search may try (default `batch_budget`)."""
        budget = self.batch_budget if budget is None else budget

        def make_place(variant: Hashable) -> PlaceFn:
            return self._planner(*cast(tuple[bool, bool], variant))

        if len(jobs) == 1 or budget <= 0:  # in arrival order, as placed online
            own = make_place((self.share_any, self.shrink_alone))
            return build_plan(GroupBook.scratch(groups, self.spec), jobs, own)
        # Each order under both candidate sets and, with rollout_shrink,
        # with groups of their own opened on fewer rollout nodes too: a
        # plan is judged whole, so that bet is only taken where it pays.
        # Only where the budget buys more plans than the seed orders under
        # the two candidate sets (not a re-plan's: it would double its time).
        affords = budget // len(jobs) > 2 * SEED_ORDERS
        alone = (False, True) if self.spec.rollout_shrink and affords else (False,)
        variants = [(share, a) for a in alone for share in (False, True)]
        return search_batch(
            groups, jobs, self.spec, make_place, self.headroom, budget, variants=variants
        )

    def replan_plan(
        self, groups: Mapping[int, Group], jobs: list[JobProfile], budget: int | None = None
    ) -> list[BatchStep]:
        """A re-plan of running `jobs` (`sim/replan.py`): the batch search with
        `replan_budget` placements or, at 0, one plan: the dearest jobs first,
        with `share_any` candidates (see `replan_budget`)."""
        budget = self.replan_budget if budget is None else budget
        if budget > 0:
            return self.place_batch(groups, jobs, budget)
        order = sorted(jobs, key=lambda j: -j.solo_cost_per_hour(self.spec))
        return build_plan(GroupBook.scratch(groups, self.spec), order, self._planner(True, False))

    def _planner(self, share_any: bool, shrink_alone: bool) -> PlaceFn:
        """This policy's placement for building one plan on a scratch book.

        A fresh policy per plan: the views cached here key on group ids,
        which the scratch copies reuse with other members.
        """
        return replace(
            self, share_any=share_any, shrink_alone=shrink_alone, rehome=False,
            _views={}, _groups={}, _joined={}, _own={}, _prune_at=16,
        ).place

    def best(
        self, groups: Mapping[int, Group], job: JobProfile, bound: float | None = None
    ) -> tuple[Placement, float]:
        """The chosen placement and the effective $/h it adds (`place`'s hot path).

        `bound`: the caller takes nothing that adds as much (a move): the
        search stops there, and a new group beyond it is reported as is.
        Candidates are ranked by a bound (`candidate_rank.py`) and simulated
        in that order; placements are built for the winner only.
        """
        spec = self.spec
        fallback, by_extra = self._own_plan(job)
        fallback_score = fallback.extra_cost_per_hour
        # What a candidate must beat: a group of its own, and the caller's bound.
        cutoff = fallback_score if bound is None else min(fallback_score, bound)
        job_budget = job.slo * job.planned_iter_s / (1.0 + self.headroom)
        if self.shares_nothing(job):
            # An SLO inside the headroom: no group runs it faster than alone,
            # so the screen would skip every candidate. Such jobs stay alone
            # for life; the simulator stops offering them moves once alone
            # (they were 38 % of all searches on 2,000 jobs).
            return fallback, fallback_score
        # On its own rollout node count: its shortest iteration; its training
        # is the same on any rollout node count, shortest on the most training nodes.
        own_min = by_extra[-1][0][1].iter_s
        train_add = by_extra[-1][0][1].train_s + spec.warm_switch_s
        ranked: list[Ranked] = []
        rules = RankRules(
            spec.warm_switch_s, *self._prices,
            self.share_any, self.share_train, self.screen, self.rate_aware,
        )
        views, owners, cap = self._views, self._groups, 1.0 + self.headroom
        max_members, screen = self.max_members, self.screen
        form = job.form
        for group in groups.values():
            if len(group.pinning) >= max_members:
                continue
            if form and other_form(group, form):  # its trainer would be rebuilt at every switch
                continue
            view = views.get(group.group_id)
            if view is None or view.version != group.version or owners.get(group.group_id) is not group:
                # The group changed since its view was built. Before building
                # another, the screens that need none: the newcomer's own
                # iteration past the tightest member's budget (the screen
                # below would skip the group), or more training nodes than
                # the group has (no candidate of the paper's kinds fits).
                if screen and own_min > slo_budget(group) / cap:
                    continue
                if not self.share_any and job.n_train > len(group.node_ids(Pool.TRAIN)):
                    continue
                view = self._group_view(group)
            elif view.targets != group.targets:
                view = self._group_view(group)
            if view.colocated:
                continue  # co-located members share no idle phase with anyone
            budget = min(view.budget / cap, job_budget)
            if screen and max(view.max_load, view.cycle, own_min) > budget:
                # Every candidate keeps or raises the busiest node's load and
                # the longest solo cycle, and the newcomer's own iteration is
                # at least `own_min`: the screens in `rank_candidates` would
                # reject each one. (Not the paper's saturation test: a group
                # past its longest solo cycle still has room up to its
                # members' SLOs; skipping it cost 1-2 % on the traces.)
                continue
            nodes = group.nodes
            train, rollout = view.train_order, view.rollout_order
            if job.train_mem_gb > view.train_room_gb:
                train = [n for n in train if nodes[n].mem_free_gb >= job.train_mem_gb]
            if job.rollout_mem_gb > view.rollout_room_gb:
                rollout = [n for n in rollout if nodes[n].mem_free_gb >= job.rollout_mem_gb]
            if self.screen and not self.share_any:
                # The paper's kinds reuse the newcomer's training node count
                # of the least-loaded training nodes whatever its rollout
                # node count: once they pass the budget, every candidate does.
                if job.n_train > len(train) or view.load[train[job.n_train - 1]] + train_add > budget:
                    continue
            for extra_train, options in enumerate(by_extra):
                rank_candidates(
                    ranked, rules, view, group, job, options, extra_train, train, rollout, budget,
                    fallback_score, cutoff,
                )
        ranked.sort(key=lambda r: r[0])
        if len(self._views) > self._prune_at:
            # Drop dissolved groups' views, when their number has doubled
            # since the last time (a caller may offer only some groups, when
            # regrouping, so the groups offered say nothing of those alive).
            for gid in [g for g, grp in self._groups.items() if not grp.members]:
                del self._views[gid], self._groups[gid]
            self._prune_at = 2 * len(self._views) + 16
        best, best_score = fallback, cutoff
        switch, fifo = spec.warm_switch_s, spec.rollout_fifo
        checks = 0
        for key, group, r_new, t_new, pinned, t, n_train in ranked:
            if checks >= self.max_checks:
                break
            lb, extra = key[0], key[1]
            if lb >= best_score:
                break  # ranked by bound: no candidate left can win
            view = self._views[group.group_id]
            n_reuse = len(pinned) - (n_train - t_new)
            reused, train_ids = pinned[:n_reuse], pinned[n_reuse:]
            fresh = max(group.nodes) + 1
            plan = MemberPlan(
                t,
                reused + tuple(range(fresh, fresh + r_new)),
                train_ids + tuple(range(fresh + r_new, fresh + r_new + t_new)),
            )
            profiles = [*group.members.values(), job]
            plans = [*view.plans, plan]
            checks += 1  # a check settled by the bound counts too: the same candidates are weighed
            # Its bounds pass a budget: the run would refuse it (`slo_bound.py`).
            # Only with FIFO rollout nodes, where the run is slow and the
            # screens above, which assume turn-locked paces, miss most refusals.
            if screen and fifo:
                floors = view_floor_base(view, profiles, self.headroom, switch).feasible_floors(plan, job)
                if floors is None:
                    continue
                # Its progress at those floors is the most it could make: if
                # even that loses to the best found, the run cannot change it.
                # (Not on a tie: the floors and the run's periods may differ
                # in the last bit, and a tie is broken by that bit.)
                if self.rate_aware:
                    most = progress_rate(floors, profiles, plans) - view.rate
                    if effective_cost(view, extra, most) > best_score + _TIE:
                        continue
            periods = evaluate_on(plans, spec)
            if not slo_periods_ok(periods, profiles, self.headroom):
                continue
            kind = CandidateKind.PACK if extra == 0 else CandidateKind.ADD_ROLLOUT
            placement = Placement(
                kind if t_new == 0 else CandidateKind.SHARE,
                group.group_id,
                rollout_nodes=reused,
                train_nodes=train_ids,
                new_rollout=r_new,
                new_train=t_new,
                extra_cost_per_hour=extra,
            )
            if not self.rate_aware:
                return placement, extra  # the paper: the cheapest feasible candidate
            score_gain = progress_rate(periods, profiles, plans) - view.rate
            score = effective_cost(view, extra, score_gain)
            if score < best_score:
                best, best_score = placement, score
                joined = Joined((*view.members, job.job_id), view.rate + score_gain, job.job_id, view.rate)
        if best is not fallback:
            self._joined[best.group_id] = joined
        return best, best_score if best is not fallback else fallback_score

