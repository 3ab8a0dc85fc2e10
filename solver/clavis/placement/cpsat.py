"""CP-SAT placement (thesis §5.5.2 Solver2D, as a constraint model instead of Choco B&B).

The solve in turns: a warm start, then CP-SAT on the rack model (rackmodel.py) or, when
the instance has no rack problem, the pool turn (pool.py: joint P-D bound and a placement
rounded from it, regroup.py) and CP-SAT on the per-host model (perhost.py: ``cpsat``
symmetric, ``plain`` boolean), then the rack bound.
The objective is F from :mod:`clavis.objectives` (same bounds, same weights); every
answer is decoded and re-scored by that evaluator, and its bound is the best of CP-SAT's,
the rack bound, the pool bound and the relaxation bounds of lower.py.

Every turn keeps one :class:`~clavis.placement.guard.Guard` (deadline and memory
budget): a model that its size estimate says cannot be built in the time or memory left
is not built, a build that overruns stops, and a watchdog stops CP-SAT's search and
presolve; the best placement found so far is always returned (issue 12).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import cast

from ortools.sat.python import cp_model

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Score, Weights, bounds, score, violations
from clavis.placement import (
    beside,
    calming,
    chunkround,
    chunks,
    estimate,
    fathom,
    hostlns,
    lower,
    pool,
    racklns,
    rackmodel,
    relayout,
)
from clavis.placement import bound as rack
from clavis.placement.baselines import corerr, noderr
from clavis.placement.consolidate import consolidate
from clavis.placement.exchange import exchange
from clavis.placement.fragments import gather_fragments
from clavis.placement.gather import gather
from clavis.placement.guard import GIB, Guard, LimitReachedError, Watchdog
from clavis.placement.hints import complete_hint
from clavis.placement.perhost import CpVars, build_model, canonical, decode
from clavis.placement.regroup import regroup, rehome
from clavis.placement.result import (
    PlacementResult,
    SolveOptions,
    Status,
    Stopwatch,
    TooLargeError,
)
from clavis.placement.symmetry import container_groups

__all__ = ["CpVars", "build_model", "canonical", "decode", "solve", "warm_start"]

# Without a rack problem or a repack, CP-SAT's per-host turn ends by this share and the
# host search has the rest: given it all, CP-SAT kept the warm start (F 0.1705) for 60 s
# on a 345-host snapshot (weights 0,1,3) whose host search found 0.1368 in 2 s, and ended
# 0.5 s past the limit's tolerance on a busy machine; with half, F 0.1295. At 60 s
# on nine such clusters (18-692 hosts, weights not the bench's): F lower on six by 1-24%,
# equal on three, bounds equal on all.
PER_HOST_SHARE = 0.5
# CP-SAT's OPTIMAL stands for F where its bound is within this share of F (its objective's
# integer scaling leaves up to 0.04% on small clusters); further below, the model it
# proved relaxes F (a rack class whose hosts' watts differ) and the answer is FEASIBLE.
RELAXED_OPTIMAL = 1e-3
# Share of the budget CP-SAT gets when the rack bound runs after it (per-host model).
RACK_SHARE_AFTER_CPSAT = 0.6
# In a repack small enough for the per-host model, CP-SAT ends by this share: the host
# search and the pool bound it defers need the rest (32 hosts, 60 s: CP-SAT took it all
# and the bound was the relaxation's 0.116 where the pool proves 0.181 in 0.1 s).
PER_HOST_SHARE_IN_REPACK = 0.5
# With the rack model, the budget goes in turns (each turn ends by the given share of
# the budget, or earlier when it has nothing more to do): CP-SAT's full model (which
# proves small instances optimal at once); the rack search (racklns.py) until it stops
# finding improvements; the rack bound (on the Table 5.3 instances its relaxation
# settles in 2-17 s); the rack search again from the best placement until the end. No
# last CP-SAT turn on the whole model: at 4,096 hosts building and presolving it overran
# the time limit by seconds, while the search keeps its deadline to a fraction of one.
PROBE_SHARE = 0.05
SEARCH_SHARE = 0.7
BOUND_END_SHARE = 0.92
SEARCH_AGAIN_END_SHARE = 0.98
# With a current placement or drained hosts each search step is a larger model (every
# occupied host a class of its own) and the search rarely settles by itself, so its first
# turn ends earlier to leave the bound its time (at 1,024 hosts and 10 s the bound proved
# nothing from 70 %).
SEARCH_SHARE_EXACT = 0.35
# Configuration variables beyond which the rack model's CP-SAT turn is skipped: with a
# current placement every occupied host is a class of its own (rackmodel.py), and at
# 1,024 hosts building that model takes longer than its 5 % turn.
PROBE_MAX_VARS = 40_000
# The host search (hostlns.py) gets what the per-host turn left, until this share of the
# budget, if at least MIN_HOST_SEARCH_SECONDS remain.
HOST_SEARCH_END_SHARE = 0.95
# Moving whole jobs onto hosts of their own (gather.py) and container exchanges
# (exchange.py) before the host search take at most this share of the time it has. The
# exchanges settle in about a second at 1,024 hosts; at 16,384 they still gain when cut
# (one 120 s run on a busy machine: F 0.2662 with a quarter, 0.2655 with 60 %), and the
# host search after them gained 0.0001 in 34 s there.
EXCHANGE_SHARE = 0.6
# In a repack the pool bound follows the exchanges and needs up to 45 % of the limit.
EXCHANGE_SHARE_BEFORE_BOUND = 0.25
# Of that window, gathering ends by this share at most (0.15-0.3 s at 1,024 hosts, 13 s
# for every job at 16,384, where the exchanges need all the time they get); the
# exchanges have the rest.
GATHER_END = 0.3
# Emptying hosts (consolidate.py) then takes at most this share of the time left for
# the host search (0.8 s at 1,024 hosts; in a 10 s repack about 1 s is left). It runs
# after a repack's pool bound: before it, it left the bound too little time in a 10 s
# repack (seed 2: 0.278, 0.300 without), and inside the exchanges' window it cut them
# short. The host search after it gains little in what is left (0.0004 of F).
EMPTYING_SHARE = 0.6
# Before a repack's pool bound, a short turn of it all the same: the bound may run to
# the end of the host search's time (a column generation round can overrun), and
# emptying gains most of what it gains in its first moments (seed 1, 10 s: 0.3323 ->
# 0.3274 in 0.04 s, lost when the bound ended 0.2 s later).
EMPTYING_SHARE_BEFORE_BOUND = 0.1
# A repack's pool rounding, or the chunk master's without a current placement
# (_second_start), is made ready in this share of the host search's time left after the
# first start's regrouping and emptying.
SECOND_SHARE = 0.6
# Of that window: regrouping into racks ends by the first share, trading contents between
# hosts of any kind (rehome) by the second, gathering by GATHER_END,
# the container exchanges by the third, emptying hosts by the fourth, and rings and grids
# dealt anew (relayout.py) have the rest: the chunk rounding of the 1,024-host snapshot of
# seed 4 (weights 6,5,7) came to F 0.3033 without that last step, 0.3018 with it, against
# 0.3039 for the first start by then.
SECOND_REGROUP_END = 0.15
SECOND_REHOME_END = 0.2
SECOND_EXCHANGE_END = 0.85
SECOND_EMPTYING_END = 0.95
SECOND_FRAGMENTS_END = 0.97  # stray containers traded into their racks (fragments.py)
# Host contents exchanged between racks again (regroup.py) after the container
# exchanges, then between hosts of any kind (regroup.rehome), and the container
# exchanges again after that, take at most this share each of the time left (regroup:
# 0.2 s at 1,024 hosts, 0.9 s at 4,096).
SWAP_SHARE = 0.1
# The host search stops this share of its time before its end, for whole host contents
# traded between hosts of any kind (regroup.rehome, in FINISH_REHOME_END of it) and the
# container exchanges after: on the 60 s answer of the 1,024-host snapshot of seed 4
# (weights 6,5,7) they lowered F from 0.30308 to 0.30266 in 0.6 s.
FINISH_SHARE = 0.05
FINISH_REHOME_END = 0.6
# Then a job's stray containers traded into the rack it talks to (fragments.py), by
# FINISH_FRAGMENTS_END of it: on the 60 s answer of seed 4 F 0.30138 -> 0.30085 in 0.1 s.
FINISH_FRAGMENTS_END = 0.75
# Rings and grids dealt anew (relayout.py) after the exchanges, in a window of their
# own: the exchanges end at their deadline in a 10 s repack and left none (seed 1:
# 0.3324 kept, where 0.01 s gives 0.3314 and the emptying after it 0.3252, not 0.3263).
RELAYOUT_SHARE = 0.05
# The calming pass again on the best so far, after the emptying, then the exchanges: the
# warm start's calming saw a placement the search has since changed (1,024-host repacks,
# from the 60 s answers: F -0.0027 on seed 2 in 2.7 s, -0.0005 on seed 1, -0.0001 on the
# others). This share of the time left; calming ends by CALM_AGAIN_END of it.
CALM_AGAIN_SHARE = 0.3
CALM_AGAIN_END = 0.7
# In a repack it also runs before the pool bound, in this share of the time left: a 10 s
# repack has no time for it after the bound, and the bound's own window shrinks by as
# much (1,024-host repacks, 10 s, seeds 1-4: F 0.3197/0.3506/0.2790/0.2276 without it,
# 0.3191/0.3480/0.2788/0.2276 with; with a share of 0.25 seed 4's bound fell from 0.2033
# to 0.1891, and in the bench's run with this share too: its master settles near the
# end of the window it has left).
CALM_BEFORE_BOUND_SHARE = 0.15
MIN_HOST_SEARCH_SECONDS = 0.2
# The warm start's greedy sweep ends by this share of the budget (it is cut short only
# on very large instances: a candidate costs a pass over every container).
WARM_SHARE = 0.2
# The calming pass (calming.py) after the warm start ends by this share of the budget.
CALM_SHARE = 0.3
# The pool turn (pool.py: joint P-D bound by column generation, and a placement rounded
# from it) ends by this share of the budget, on instances without a rack problem.
POOL_END_SHARE = 0.5
# The chunk bound (chunks.py: the pool with jobs in its patterns, C tied to them) then has
# this share of the budget, and runs only if its first round's pace lets it settle in
# it: at 1,024 hosts without a current placement it settles in 4-8 s (bounds +0.0004 to
# +0.0015 over the pool's), so a 60 s solve runs it and a 10 s one stops after a round.
# Above CHUNK_MOST groups times host types it is not tried (16,384 hosts: about 9,000).
CHUNK_SHARE = 0.3
CHUNK_MOST = 4000
# The chunk rounding takes a column once more for its fraction above this (chunkround.py).
# On the 1,024-host snapshot of seed 4 (weights 6,5,7), from the master seeded with the
# 60 s answer and polished alike: F 0.3030 (0), 0.3015 (0.2), 0.3024 (0.4), 0.3028
# (0.5); within a solve the master's fractions there and on seed 2 all lie where 0, 0.2
# and 0.4 round alike.
CHUNK_ROUND_UP = 0.2
# In a repack the chunk bound has this share of what the pool bound's window has left
# before the trade rows (which take the rest); every host with residents is a host type
# of its own there, so CHUNK_MOST admits up to a few hundred hosts.
CHUNK_REPACK_SHARE = 0.5
# A repack tries the pool's rounding as a start where moving this share of the bytes
# would cost less than the start's distance to the bound (_rounding_may_pay): the
# roundings measured moved 86-100% (64 to 2,048 hosts). At 0.5 a 1,024-host repack whose
# start was 0.62 of M's weight above the rounding's pool tried one: 0.545 against 0.397.
ROUNDING_MOVED = 0.9
# With a rack problem or a repack only the pool bound runs, for this share of the
# budget at most: without a current placement it settles in a few rounds (0.02 s at
# 1,024 hosts); a repack's hosts with residents are types of their own (M), which
# takes about 11 rounds and 4-5 s at 1,024 hosts on the 2-core bench machine. At 15%
# a 10 s repack stopped it after 1.5 s (bound 0.212 for 0.264 settled, seed 1); the
# search it waits for gained 0.0004 of F in those seconds.
POOL_BOUND_SHARE = 0.45
# A repack's master with mover rows that share the Stay rows' z (landing.py) takes
# about twice the rounds of the Stay master (1,024-host repacks: 14-56 rounds, 20 s):
# with at least this many seconds left after the master without Stay rows it goes
# first, alone (seed 3, 60 s: after the Stay master it did not settle in time and the
# bound stayed at that master's 0.2525; first, 0.2554); with less, the Stay master
# settles first (10 s, seed 2: alone 0.3075, after it 0.3093).
MOVERS_FIRST_SECONDS = 12.0
# Of what a repack's pool window has left after its Stay bound, the per-job trade
# floors (tradeoff.py) take at most this share and the solve with their rows the rest.
# Small repacks gain (32 hosts: 0.1545 -> 0.1763); at 1,024 hosts the 60 s window has
# room for them (about 3 s, no row), the 10 s one none.
TRADE_SHARE = 0.5
# Exchanging alike hosts' contents to bring jobs into racks (regroup.py) after it ends by
# this share.
REGROUP_END_SHARE = 0.6
# A per-host model is built only if its estimated build time is within this share of
# the time left (the rest is CP-SAT's search); plain, which has no other answer than
# its start, is refused when it is not.
BUILD_SHARE = 0.5
# The rack bound after a per-host turn is not started with less time than this left:
# setting it up alone takes a good part of a second on large instances.
MIN_BOUND_SECONDS = 0.5


def warm_start(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    given: Assignment | None,
    guard: Guard | None = None,
) -> Assignment | None:
    """The best of the given placement (usually the current one), CoreRR, NodeRR and the
    greedy schedules of :mod:`clavis.placement.fathom` (those it has time for under the
    ``guard``; the first three always).

    CP-SAT's first solutions on large instances are poor; starting from a known good
    placement means the answer is never worse than the baselines it is compared with.
    """
    best: Assignment | None = None
    best_f = math.inf
    made = [given, corerr(inst), noderr(inst)]
    for a in [*made, *fathom.candidates(inst, guard)]:
        if a is None or violations(inst, a):
            continue
        f = score(inst, a, weights, limits).F
        if f < best_f:
            best, best_f = a, f
    return best


def _calm(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    hint: Assignment,
    *,
    options: SolveOptions,
    watch: Stopwatch,
) -> Assignment:
    """The warm start with lagging devil jobs calmed one by one where F says it pays
    (calming.py). In a repack whose current placement lost the warm start to a greedy
    schedule, the current placement is calmed first and the better of the two goes on:
    the schedule moves nearly every container, and what the search after it can win
    back of M is little (1,024 hosts, seed 5, 10 s: the schedule scored 0.459 against
    the current's 0.501, calmed 0.458 against 0.395; F at the end 0.417 against 0.370)."""
    until = time.monotonic() + options.time_limit * CALM_SHARE - watch.elapsed
    starts = [hint]
    given = options.hint
    if (
        inst.has_current
        and weights.M > 0
        and given is not None
        and given != hint
        and not violations(inst, given)
    ):
        starts = [given, hint]
    calmed = [calming.improve(inst, weights, limits, a, deadline=until) or a for a in starts]
    return min(calmed, key=lambda a: score(inst, a, weights, limits).F)


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, watch: Stopwatch) -> None:
        super().__init__()
        self.watch = watch

    def on_solution_callback(self) -> None:
        self.watch.offer(self.objective_value, self.best_objective_bound)


def _solver(options: SolveOptions, seconds: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, seconds)
    solver.parameters.random_seed = options.seed
    solver.parameters.num_workers = options.threads
    if options.deterministic:
        solver.parameters.num_workers = 1
        solver.parameters.max_deterministic_time = options.time_limit
        solver.parameters.max_time_in_seconds = 20 * options.time_limit  # a safety net
    return solver


@dataclass
class _Outcome:
    """What one CP-SAT run gave: its status, decoded answer and proven bound."""

    status: Status
    assignment: Assignment | None
    bound: float | None
    note: str = ""  # why the turn was skipped or cut short


def _too_large(size: estimate.ModelSize, guard: Guard, what: str) -> str:
    """Why a model of this size is not built now ("" if it can be)."""
    if size.seconds > BUILD_SHARE * guard.left():
        return (
            f"{what} has about {size.units:,} units; building it would take about "
            f"{size.seconds:.0f} s, more than {BUILD_SHARE:.0%} of the {guard.left():.1f} s left"
        )
    if size.bytes > guard.memory_left():
        return (
            f"{what} has about {size.units:,} units; it would need about "
            f"{size.bytes / GIB:.1f} GiB, more than the {guard.memory_left() / GIB:.1f} GiB "
            "left in the memory budget"
        )
    return ""


def _run_per_host(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    *,
    limits: Bounds,
    hint: Assignment | None,
    watch: Stopwatch,
    guard: Guard,
    symmetric: bool,
) -> _Outcome:
    """CP-SAT on the per-host model until the guard's deadline, if it can be built."""
    groups = container_groups(inst, aggregate=symmetric)
    size = estimate.per_host_size(inst, groups) if symmetric else estimate.plain_size(inst)
    if not options.deterministic:
        why = _too_large(size, guard, "the per-host model")
        if why:
            return _Outcome("UNKNOWN", None, None, f"CP-SAT turn skipped: {why}")
    try:
        model, v = build_model(
            inst, weights, limits, symmetric=symmetric, hint=hint, groups=groups, guard=guard
        )
        if hint is not None:
            complete_hint(model, v.y.values(), max(0.01, guard.left() / 4), guard)
    except LimitReachedError as why:
        return _Outcome("UNKNOWN", None, None, f"CP-SAT turn stopped while building: {why}")
    solver = _solver(options, guard.left())
    with Watchdog(solver, guard) as dog:
        code = solver.solve(model, _Progress(watch))
    assignment = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = decode(inst, v, {k: int(solver.value(x)) for k, x in v.y.items()})
    note = f"CP-SAT stopped early: {dog.reason}" if dog.reason else ""
    status = cast(Status, solver.status_name(code))
    return _Outcome(status, assignment, _bound_of(solver, code), note)


def refuse_plain(inst: Instance, options: SolveOptions) -> None:
    """Raise TooLargeError at once when the plain model cannot be built within the time
    limit or the memory budget: its only other answer would be its start."""
    if options.deterministic:
        return
    guard = Guard.after(options.time_limit, options.memory_limit)
    why = _too_large(estimate.plain_size(inst), guard, "the plain model")
    if why:
        raise TooLargeError(f"--method plain: {why}; use --method cpsat or a longer --time-limit")


def _run_racks(
    inst: Instance,
    options: SolveOptions,
    racks: rack.RackProblem,
    *,
    hint: Assignment | None,
    watch: Stopwatch,
    budget: float,
) -> _Outcome:
    """CP-SAT on the rack model until ``budget`` seconds into the solve."""
    model, v = rackmodel.build_rack_model(racks)
    if hint is not None:
        counts = rackmodel.hint_counts(racks, hint)
        for key, x in v.x.items():
            model.add_hint(x, counts.get(key, 0))
        complete_hint(model, v.x.values(), max(0.01, (budget - watch.elapsed) / 4))
    solver = _solver(options, budget - watch.elapsed)
    # The watchdog holds presolve to the turn's end too (CP-SAT's own limit may not).
    turn = Guard.after(budget - watch.elapsed, options.memory_limit)
    with Watchdog(solver, turn) if not options.deterministic else _nothing():
        code = solver.solve(model, _Progress(watch))
    assignment = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        value = {k: int(solver.value(x)) for k, x in v.x.items()}
        assignment = rack.decode(racks, inst, rackmodel.per_rack_uses(racks, value))
        if assignment is None:
            raise RuntimeError("rack model answer does not hold every container")
    return _Outcome(cast(Status, solver.status_name(code)), assignment, _bound_of(solver, code))


def _nothing() -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _bound_of(solver: cp_model.CpSolver, code: cp_model.CpSolverStatus) -> float | None:
    bound = solver.best_objective_bound
    if code == cp_model.INFEASIBLE or not math.isfinite(bound):
        return None
    return max(0.0, bound)  # F >= 0 always: the normalisation bounds are valid


def _search_then_bound(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    racks: rack.RackProblem,
    *,
    relaxed: rack.RackProblem,
    limits: Bounds,
    hint: Assignment,
    start: Score,
    watch: Stopwatch,
) -> tuple[rack.BoundResult, Assignment, Score]:
    """The rack search from the warm start, the rack bound (with its dives) against what
    it found, and the rack search again with the time the bound left. Returns the bound
    and the best placement, with its score. The search works on ``racks`` (exact, M
    included), the bound on ``relaxed`` (M left out, drained hosts up: still valid)."""

    def search(hint: Assignment, start: Score, until: float) -> tuple[Assignment, Score]:
        def offer(a: Assignment) -> None:
            watch.offer(score(inst, a, weights, limits).F)

        left = options.time_limit * until - watch.elapsed
        better = racklns.improve(
            racks, inst, hint, deadline=time.monotonic() + left, seed=options.seed, found=offer
        )
        if better is not None and not violations(inst, better):
            got = score(inst, better, weights, limits)
            if got.F < start.F:
                return better, got
        return hint, start

    first = SEARCH_SHARE_EXACT if racks is not relaxed else SEARCH_SHARE
    hint, start = search(hint, start, first)
    early = rack.rack_bound(
        relaxed,
        inst,
        weights=weights,
        limits=limits,
        incumbent=start.F,
        time_limit=options.time_limit * BOUND_END_SHARE - watch.elapsed,
        seed=hint,
    )
    if early.assignment is not None:
        hint, start = early.assignment, score(inst, early.assignment, weights, limits)
    watch.offer(start.F, early.bound)
    if not _proves(early.bound, start.F):
        hint, start = search(hint, start, SEARCH_AGAIN_END_SHARE)
    return early, hint, start


def _solve_racks(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    racks: rack.RackProblem,
    *,
    relaxed: rack.RackProblem,
    limits: Bounds,
    hint: Assignment | None,
    start: Score | None,
    watch: Stopwatch,
) -> tuple[_Outcome, rack.BoundResult | None, Assignment | None, Score | None]:
    """The rack model's turns (see SEARCH_SHARE). Returns the outcome (the best placement
    and CP-SAT's bound; solve() decides whether the bounds prove it optimal), the rack
    bound if it ran, and the best placement with its score."""
    if options.deterministic or hint is None or start is None:
        out = _run_racks(inst, options, racks, hint=hint, watch=watch, budget=options.time_limit)
        return out, None, hint, start
    if rackmodel.size(racks) <= PROBE_MAX_VARS:
        probe = options.time_limit * PROBE_SHARE
        out = _run_racks(inst, options, racks, hint=hint, watch=watch, budget=probe)
        if out.status == "OPTIMAL" and _proved_by_model(inst, weights, limits, out):
            return out, None, hint, start
    else:
        out = _Outcome("FEASIBLE", None, None)
    if out.assignment is not None:
        found = score(inst, out.assignment, weights, limits)
        if found.F < start.F:
            hint, start = out.assignment, found
    early, hint, start = _search_then_bound(
        inst,
        weights,
        options,
        racks,
        relaxed=relaxed,
        limits=limits,
        hint=hint,
        start=start,
        watch=watch,
    )
    return _Outcome("FEASIBLE", hint, out.bound), early, hint, start


def _host_search(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    *,
    limits: Bounds,
    best: tuple[Assignment, Score, Status],
    watch: Stopwatch,
    between: Callable[[], Assignment | None] | None = None,
    rounding: Callable[[], Assignment | None] | None = None,
    other: Assignment | None = None,
    second: Assignment | None = None,
) -> tuple[Assignment, Score, Status]:
    """The host search (hostlns.py) from the best placement so far, with the time the
    per-host turn left: on instances without a rack problem (too many patterns) the
    per-host model is often too large to build at all. Whole jobs moved onto hosts of
    their own (gather.py) and container exchanges (exchange.py) go first: they settle in
    well under a second and leave the search a placement whose jobs are already
    gathered; then rings and grids are dealt anew over their places (relayout.py).
    ``between`` runs after them, a short turn of emptying hosts and one of calming
    lagging jobs again (a repack's pool bound: the exchanges gain most in the least
    time, the host search little). Then jobs
    are regrouped into racks, lightly loaded hosts emptied (consolidate.py) and lagging
    jobs calmed again (calming.py, then the exchanges); what ``between`` returned, a
    placement rounded from that pool, is then regrouped, gathered and exchanged in a
    window of its own and kept if it ends better (_second_start). With the bound beside
    the search (beside.py) there is no ``between``, and ``rounding`` says what rounding
    it has reported by then, if any.
    ``other``, a second start, is gathered too in what time the first leaves of
    gathering's share, and the better of the two goes on: which start
    ends better is not always the one that starts better (the pool rounding keeps jobs
    on few hosts, the warm start may score a little better and gather far worse).
    ``second``, the chunk master's rounding in a solve without a current placement,
    takes the place of ``between``'s rounding: made ready in a window of its own after
    the first start's steps, kept if it ends better."""
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    if best[2] == "OPTIMAL" or left < MIN_HOST_SEARCH_SECONDS:
        return best
    k, _ = limits.linear(weights)
    repack = between is not None or rounding is not None
    share = EXCHANGE_SHARE_BEFORE_BOUND if repack else EXCHANGE_SHARE
    now, window = time.monotonic(), left * share
    gathered = gather(inst, best[0], k=k, deadline=now + window * GATHER_END)
    if other is not None and other != best[0] and time.monotonic() < now + window * GATHER_END:
        second = gather(inst, other, k=k, deadline=now + window * GATHER_END)
        if score(inst, second, weights, limits).F < score(inst, gathered, weights, limits).F:
            gathered = second
    gathered = exchange(inst, gathered, k=k, deadline=now + window)
    gathered = relayout.improve(
        inst, gathered, k_c=k[2], k_m=k[3], deadline=time.monotonic() + left * RELAYOUT_SHARE
    )
    best = _better(inst, weights, limits, best, gathered, watch=watch)
    rounded: Assignment | None = second
    if repack:
        left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
        until = time.monotonic() + left * EMPTYING_SHARE_BEFORE_BOUND
        best = _better(
            inst,
            weights,
            limits,
            best,
            consolidate(inst, best[0], k=k, deadline=until),
            watch=watch,
        )
        best = _calm_again(
            inst,
            weights,
            limits,
            best,
            k=k,
            share=CALM_BEFORE_BOUND_SHARE,
            watch=watch,
            options=options,
        )
        rounded = between() if between is not None else rounded
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    until = time.monotonic() + left * SWAP_SHARE
    swapped = regroup(inst, best[0], k_c=k[2], k_m=k[3], deadline=until)
    swapped = rehome(inst, swapped, k=k, deadline=time.monotonic() + left * SWAP_SHARE)
    if swapped != best[0]:
        swapped = exchange(inst, swapped, k=k, deadline=time.monotonic() + left * SWAP_SHARE)
        best = _better(inst, weights, limits, best, swapped, watch=watch)
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    emptied = consolidate(inst, best[0], k=k, deadline=time.monotonic() + left * EMPTYING_SHARE)
    best = _better(inst, weights, limits, best, emptied, watch=watch)
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    if left >= MIN_HOST_SEARCH_SECONDS:  # a 10 s repack has none left here
        best = _calm_again(
            inst, weights, limits, best, k=k, share=CALM_AGAIN_SHARE, watch=watch, options=options
        )
        left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    # Beside, the rounding comes when the bound's process has it: if the host search
    # starts before, it stops when the rounding comes, and goes on after its turn (a
    # 64-host repack at 80% of cores, 10 s: rounded at 3 s, F 0.3315; left out, 0.3770).
    pending = rounding
    if rounded is None and pending is not None:
        rounded = pending()

    def offer(_a: Assignment, f: float) -> None:
        watch.offer(f)

    for _turn in range(2):  # the second only after a rounding came during the first
        if rounded is not None:
            pending = None
            if not violations(inst, rounded):
                # After the first start's own steps: in a 10 s repack little is left, and
                # taking it before them cost seed 1 0.0009 of F where it does not win.
                second = _second_start(inst, rounded, k, time.monotonic() + left * SECOND_SHARE)
                best = _better(inst, weights, limits, best, second, watch=watch)
                left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
        if left < MIN_HOST_SEARCH_SECONDS:
            return best
        better = hostlns.improve(
            inst,
            weights,
            limits,
            best[0],
            deadline=time.monotonic() + left * (1 - FINISH_SHARE),
            seed=options.seed,
            found=offer,
            stop=None if pending is None else _has(pending),
        )
        if better is not None:
            best = _better(inst, weights, limits, best, better, watch=watch)
        left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
        rounded = None if pending is None else pending()
        if rounded is None:
            break
    return _finish(inst, weights, limits, best, k=k, options=options, watch=watch)


def _finish(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    best: tuple[Assignment, Score, Status],
    *,
    k: tuple[float, float, float, float],
    options: SolveOptions,
    watch: Stopwatch,
) -> tuple[Assignment, Score, Status]:
    """The host search's answer with whole host contents traded once more (rehome: the
    search's steps of a few hosts leave contents that would gather a job elsewhere), its
    jobs' stray containers traded into their racks (fragments.py) and the container
    exchanges after, in what the host search left."""
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    if left <= 0:
        return best
    now = time.monotonic()
    placed = rehome(inst, best[0], k=k, deadline=now + left * FINISH_REHOME_END)
    placed = gather_fragments(inst, placed, k=k, deadline=now + left * FINISH_FRAGMENTS_END)
    if tuple(placed) == tuple(best[0]):
        return best
    placed = exchange(inst, placed, k=k, deadline=now + left)
    return _better(inst, weights, limits, best, placed, watch=watch)


def _has(poll: Callable[[], Assignment | None]) -> Callable[[], bool]:
    """Whether ``poll`` has something now (the host search's stop)."""
    return lambda: poll() is not None


def _calm_again(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    best: tuple[Assignment, Score, Status],
    *,
    k: tuple[float, float, float, float],
    share: float,
    watch: Stopwatch,
    options: SolveOptions,
) -> tuple[Assignment, Score, Status]:
    """The calming pass on the best so far, then the exchanges, in ``share`` of the host
    search's time left (calming ends by CALM_AGAIN_END of it)."""
    left = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
    if left < MIN_HOST_SEARCH_SECONDS:
        return best
    now, window = time.monotonic(), left * share
    calmed = calming.improve(inst, weights, limits, best[0], deadline=now + window * CALM_AGAIN_END)
    if calmed is None:
        return best
    calmed = exchange(inst, calmed, k=k, deadline=now + window)
    return _better(inst, weights, limits, best, calmed, watch=watch)


def _second_start(
    inst: Instance, start: Assignment, k: tuple[float, float, float, float], deadline: float
) -> Assignment:
    """A rounding made ready to compare: its jobs regrouped into racks, gathered and
    exchanged, lightly loaded hosts emptied, stray containers traded into their jobs'
    racks and rings and grids dealt anew by the deadline."""
    now = time.monotonic()
    window = deadline - now
    placed = regroup(inst, start, k_c=k[2], k_m=k[3], deadline=now + window * SECOND_REGROUP_END)
    placed = rehome(inst, placed, k=k, deadline=now + window * SECOND_REHOME_END)
    placed = gather(inst, placed, k=k, deadline=now + window * GATHER_END)
    placed = exchange(inst, placed, k=k, deadline=now + window * SECOND_EXCHANGE_END)
    placed = consolidate(inst, placed, k=k, deadline=now + window * SECOND_EMPTYING_END)
    placed = gather_fragments(inst, placed, k=k, deadline=now + window * SECOND_FRAGMENTS_END)
    return relayout.improve(inst, placed, k_c=k[2], k_m=k[3], deadline=deadline)


def _better(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    best: tuple[Assignment, Score, Status],
    found: Assignment,
    *,
    watch: Stopwatch,
) -> tuple[Assignment, Score, Status]:
    """The placement found, scored, if it is valid and better than the best so far."""
    if found == best[0] or violations(inst, found):
        return best
    got = score(inst, found, weights, limits)
    if got.F >= best[1].F:
        return best
    watch.offer(got.F)
    return found, got, "FEASIBLE"


def _pool_bound(
    inst: Instance,
    weights: Weights,
    *,
    limits: Bounds,
    floor: float,
    deadline: float,
    rounding: float | None = None,
    report: beside.Report | None = None,
) -> tuple[float, Assignment | None]:
    """The pool bound (pool.py) raises the floor by ``deadline``. In a repack it runs
    again with what its talking jobs send if their residents stay (pool.Stay) and what
    the moved ones send (landing.py), in one master or, in a short window, the first
    before the second (MOVERS_FIRST_SECONDS), and, as time allows, with trade rows. With
    ``rounding`` (a repack's bound for the host search, which ends then) the first
    master's patterns are also rounded by then, the residents they keep staying
    (pool.round_by_jobs with keep): the host search's second start. ``report`` hears
    every rise of the floor and the rounding as they come (beside.py). Returns the floor
    and that rounding, if any."""

    def rise(got: float) -> float:
        if got > floor and report is not None:
            report(got, None)
        return max(floor, got)

    relaxed = pool.prepare(inst, weights, limits, stay=False)
    if relaxed is None:
        return floor, None
    # Without Stay rows it settles in a few rounds; they start the larger master below.
    answer = pool.solve(relaxed, deadline)
    floor = rise(answer.bound)
    first = deadline - time.monotonic() >= MOVERS_FIRST_SECONDS
    tighter = pool.prepare(inst, weights, limits, landing=first)
    # Without Stay rows (no residents talk across hosts) it is the master above.
    if tighter is None or tighter.stay is None or not tighter.stay.row_job:
        chunked = _repack_chunk_bound(inst, weights, limits, floor=floor, deadline=deadline)
        return rise(chunked), None
    if time.monotonic() >= deadline:
        return floor, None
    answer = pool.solve(tighter, deadline, start=answer.columns)
    floor = rise(answer.bound)
    rounded = None
    if rounding is not None:
        rounded = pool.round_by_jobs(inst, tighter, answer, rounding, keep=True)
        if report is not None and rounded is not None:
            report(None, rounded)
    # In a short window the master with mover rows (landing.py) comes after the one
    # above, which leaves the bound and the rounding as they were if it does not settle
    # in time (MOVERS_FIRST_SECONDS).
    landed = None if first else pool.prepare(inst, weights, limits)
    moving = landed is not None and landed.stay is not None and bool(landed.stay.mover_rows)
    if landed is not None and moving and time.monotonic() < deadline:
        got = pool.solve(landed, deadline, start=answer.columns)
        floor = rise(got.bound)
        answer = got if got.lp is not None else answer  # the trade rows start from it
    floor = rise(_repack_chunk_bound(inst, weights, limits, floor=floor, deadline=deadline))
    floor = rise(_traded_bound(inst, weights, limits, answer, deadline))
    return floor, rounded


def _pool_bound_beside(
    inst: Instance, weights: Weights, limits: Bounds, deadline: float, *, report: beside.Report
) -> None:
    """A repack's pool bound and rounding in the child process of beside.py."""
    _pool_bound(
        inst, weights, limits=limits, floor=0.0, deadline=deadline, rounding=deadline, report=report
    )


def _repack_chunk_bound(
    inst: Instance, weights: Weights, limits: Bounds, *, floor: float, deadline: float
) -> float:
    """The chunk bound with residents in CHUNK_REPACK_SHARE of what the window has left,
    where its hosts are few enough (a DP per host with residents and round): on small
    repacks it may prove more than every pool master (8 hosts: 0.2123 -> 0.2194 of an
    optimum of 0.2208)."""
    window = CHUNK_REPACK_SHARE * (deadline - time.monotonic())
    if window <= 0:
        return floor
    return _chunk_bound(inst, weights, limits, floor=floor, start=None, seconds=window)


def _chunk_bound(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    *,
    floor: float,
    start: Assignment | None,
    seconds: float,
) -> float:
    """The floor raised by the chunk bound (chunks.py) where it applies and its pace lets
    it settle in ``seconds``, seeded with the start's hosts."""
    return _chunk_rounding(inst, weights, limits, floor=floor, start=start, seconds=seconds)[0]


def _chunk_rounding(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    *,
    floor: float,
    start: Assignment | None,
    seconds: float,
    rounding: bool = False,
) -> tuple[float, Assignment | None]:
    """_chunk_bound, and with ``rounding`` a placement rounded from its master
    (chunkround.py) if the master settled and the window has time left for it."""
    pb = chunks.prepare(inst, weights, limits, most_work=CHUNK_MOST)
    if pb is None:
        return floor, None
    deadline = time.monotonic() + seconds  # the window is the master's: prepare aside
    got = chunks.solve(pb, deadline, inst=inst, start=start, paced=True)
    rounded = None
    if rounding and got.converged:
        rounded = chunkround.round_master(inst, pb, got.primal, deadline, up=CHUNK_ROUND_UP)
    return max(floor, got.bound), rounded


def relaxation_bound(inst: Instance, weights: Weights, seconds: float) -> float:
    """The bound a solve has where CP-SAT's own proves nothing (the per-host model from
    64 hosts up): lower.py's relaxations and the pool bound with its repack rows, the
    pool given ``seconds``, and without a weighted current placement the master dived
    once, as _pool_placements does (there without the power floor row, which only raises
    a branch's bound), then the chunk bound in what is left. bench/solver/bound_bench.py
    sets it beside proven optima."""
    limits = bounds(inst)
    floor = lower.lower_bound(inst, weights, limits).F
    if inst.has_current and weights.M > 0:
        deadline = time.monotonic() + seconds
        return _pool_bound(inst, weights, limits=limits, floor=floor, deadline=deadline)[0]
    # Without residents to keep, _pool_bound is this relaxed master alone.
    deadline = time.monotonic() + seconds
    relaxed = pool.prepare(inst, weights, limits, stay=False)
    if relaxed is None:
        return floor
    answer = pool.solve(relaxed, deadline)
    floor = max(floor, answer.bound, pool.dive(relaxed, answer, deadline).bound)
    left = deadline - time.monotonic()
    if left <= 0:
        return floor
    return _chunk_bound(inst, weights, limits, floor=floor, start=None, seconds=left)


def _pool_placements(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    *,
    limits: Bounds,
    floor: float,
    hint: Assignment | None,
    start: Score | None,
    watch: Stopwatch,
    beat: float | None = None,
) -> tuple[float, Assignment | None, Score | None, Assignment | None]:
    """The pool's patterns filled job by job into placements (_roundings), regrouped into
    racks, on instances without a rack problem, from the master dived once (pool.dive);
    the pool bound, and the dive's where the pool is a relaxation, raise the floor on the
    way. The best of them and the hint is returned as the hint, the next best last: after
    gathering it may still be the better start (_host_search). In a repack the rounding
    ignores where containers are (scored with M after); with ``beat`` it is made only if
    its pool, moving ROUNDING_MOVED of the bytes, could end below that."""
    deadline = time.monotonic() + options.time_limit * POOL_END_SHARE - watch.elapsed
    # A repack's rounding uses the pool without residents, which settles in a few rounds
    # where the repack's own, a host type per host with residents, took 14 s at 2,048
    # hosts. That pool is no bound (drained hosts lose their residents' room).
    plan = inst
    if inst.has_current and weights.M > 0:
        plan = replace(inst, current=(None,) * len(inst.containers))
    relaxed = pool.prepare(plan, weights, limits, stay=False)
    if relaxed is None:
        return floor, hint, start, None
    # Six groups at most: it settles in a few rounds at any size. Rounded without the
    # power floor row; where the row joins (small clusters), the bound comes again with it.
    answer = pool.solve(relaxed, deadline, power=False)
    if plan is inst:
        floor = max(floor, answer.bound)
        if pool.below_power_floor(relaxed, answer):
            floor = max(floor, pool.solve(relaxed, deadline, start=answer.columns).bound)
    elif beat is not None and not (
        math.isfinite(answer.bound) and answer.bound + weights.M * ROUNDING_MOVED < beat
    ):
        return floor, hint, start, None  # a repack's rounding cannot beat its start
    # Drained hosts may keep only their residents: the placement uses up hosts only. And
    # it follows a master without the capacity floor (pool.prepare).
    placing: pool.PoolProblem | None = relaxed
    drained = any(plan.hosts[hi].state != "up" for ht in relaxed.types for hi in ht.hosts)
    if drained or (relaxed.stay is not None and relaxed.stay.shared >= 0):
        placing = pool.prepare(plan, weights, limits, up_only=drained, capacity=False)
        if placing is not None:
            answer = pool.solve(placing, deadline, power=False)
    if placing is None:
        return floor, hint, start, None
    dived = pool.dive(placing, answer, deadline, power=False)
    if plan is inst and not placing.restricted and dived is not answer:
        floor = max(floor, dived.bound)  # the lower of its two branches: a bound
    answer = dived
    (_k_p, _k_d, k_c, k_m), _ = limits.linear(weights)
    until = time.monotonic() + options.time_limit * REGROUP_END_SHARE - watch.elapsed
    found: list[tuple[Score, Assignment]] = []
    roundings = list(_roundings(plan, weights, limits, placing, answer, deadline=deadline))
    for n, rounded in enumerate(roundings):
        now = time.monotonic()  # the regroupings share the window evenly
        placed = regroup(
            inst, rounded, k_c=k_c, k_m=k_m, deadline=now + (until - now) / (len(roundings) - n)
        )
        if not violations(inst, placed):
            found.append((score(inst, placed, weights, limits), placed))
    if not found:
        return floor, hint, start, None
    if hint is not None and start is not None:
        found.append((start, hint))
    found.sort(key=lambda sa: sa[0].F)
    (got, best), other = found[0], (found[1][1] if len(found) > 1 else None)
    if best is not hint:
        watch.offer(got.F, floor)
    return floor, best, got, other


class _DeferredBound:
    """A repack's pool bound: in a process of its own beside the search from the start of
    the solve where there are cores for it (beside.py), else run between the host
    search's steps (or after it, if the search had no time)."""

    def __init__(
        self,
        inst: Instance,
        weights: Weights,
        options: SolveOptions,
        limits: Bounds,
        watch: Stopwatch,
    ) -> None:
        self.inst, self.weights, self.options = inst, weights, options
        self.limits, self.watch = limits, watch
        self.floor = 0.0
        self.ran = False
        self.aside: beside.Beside | None = None
        if beside.can_run(options.threads):
            end = options.time_limit * HOST_SEARCH_END_SHARE - watch.elapsed
            deadline = time.monotonic() + end
            args = (inst, weights, limits, deadline)
            self.aside = beside.Beside(_pool_bound_beside, args, deadline)

    def run(self) -> Assignment | None:
        """The bound between the host search's steps: raises the floor and returns the
        rounding of the repack's pool, if any."""
        self.ran = True
        now, end = time.monotonic(), self.options.time_limit * HOST_SEARCH_END_SHARE
        until = now + end - self.watch.elapsed
        self.floor, rounded = _pool_bound(
            self.inst,
            self.weights,
            limits=self.limits,
            floor=self.floor,
            deadline=min(now + self.options.time_limit * POOL_BOUND_SHARE, until),
            rounding=until,
        )
        return rounded

    def rounding(self) -> Assignment | None:
        """The rounding the process beside has reported so far, if any."""
        return None if self.aside is None else self.aside.poll().rounding

    def finish(self, floor: float, notes: list[str]) -> float:
        """The floor raised by the bound, which is waited for (beside) or run now (if
        the host search had no time for it); why the process beside failed, if it did,
        joins the notes."""
        if self.aside is None:
            if not self.ran:
                self.run()
            return max(floor, self.floor)
        got = self.aside.finish()
        if got.error:
            notes.append(f"pool bound beside the search: {got.error}")
        return max(floor, got.floor)

    def stop(self) -> None:
        if self.aside is not None:
            self.aside.stop()


def _traded_bound(
    inst: Instance, weights: Weights, limits: Bounds, answer: pool.PoolAnswer, deadline: float
) -> float:
    """The repack bound once more with trade rows (tradeoff.py), in what the window has
    left after the Stay bound: a share of it to prove each small talking job's least C
    and M, the rest to solve again from the last patterns; 0 if no job gains a row."""
    now = time.monotonic()
    if now >= deadline:
        return 0.0
    traded = pool.prepare(inst, weights, limits, trade_until=now + TRADE_SHARE * (deadline - now))
    if traded is None or traded.stay is None:
        return 0.0
    if not any(k != traded.stay.shared for k, _least in traded.stay.trade):
        return 0.0  # no job gained a trade row of its own
    return pool.solve(traded, deadline, start=answer.columns).bound


def _roundings(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    placing: pool.PoolProblem,
    answer: pool.PoolAnswer,
    *,
    deadline: float,
) -> Iterator[Assignment]:
    """The pool's answer rounded to placements: as it is, and again with the lagging
    talking jobs kept whole (pool.lagging_whole) where there are any."""
    first = pool.round_by_jobs(inst, placing, answer, deadline)
    if first is not None:
        yield first
    view = pool.lagging_whole(inst, answer)
    if view is None:
        return
    again = pool.prepare(view, weights, limits, up_only=True)
    if again is None:
        return
    second = pool.round_by_jobs(view, again, pool.solve(again, deadline, power=False), deadline)
    if second is not None:
        yield second


def _rounding_may_pay(weights: Weights, start: Score, floor: float) -> bool:
    """Whether a repack should try the pool's rounding, which ignores the current
    placement and moves most containers: only where moving ROUNDING_MOVED of all bytes
    costs less than the start's distance to the bound; _pool_placements
    checks it again against the rounding's own pool (``beat``) before rounding. At 10 s:
    64 hosts at 80% of cores, weights 5,6,9,1, F 0.292 -> 0.273 (the rounding starts at
    0.289, the calmed start at 0.301); 2,048 hosts at 40%, 8,3,3,1, 0.361 -> 0.347; the
    bench's 128-host seed 6 0.523 -> 0.498. The bench's 1,024-host repacks (M's weight
    0.17-0.44) do not qualify and keep the time for the search and the bound."""
    return start.F - floor > weights.M * ROUNDING_MOVED


def _proves(bound: float, f: float, slack: float = 1e-9) -> bool:
    return bound >= f - slack * max(1.0, f)


def _proved_by_model(inst: Instance, weights: Weights, limits: Bounds, out: _Outcome) -> bool:
    """Whether CP-SAT's optimum is F's: its bound meets the answer's F up to its integer
    scaling (RELAXED_OPTIMAL), not just the optimum of a model that relaxes F."""
    if out.assignment is None or out.bound is None:
        return False
    return _proves(out.bound, score(inst, out.assignment, weights, limits).F, RELAXED_OPTIMAL)


def _guard(options: SolveOptions) -> Guard:
    # Deterministic solves count CP-SAT's deterministic seconds, not wall time; the
    # guard only keeps its safety net (see _solver).
    seconds = options.time_limit * (20 if options.deterministic else 1)
    return Guard.after(seconds, options.memory_limit)


def solve(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    *,
    symmetric: bool = True,
) -> PlacementResult:
    watch = Stopwatch(options)
    limits = bounds(inst)
    racks = rack.prepare(inst, weights, limits) if symmetric else None
    # The rounding knows no current placement: with M it moves nearly every container
    # (1,024 hosts: M_n 0.93), so a repack keeps its time for the search and its pool
    # bound runs beside it, or waits for the exchanges (_host_search).
    repack = inst.has_current and weights.M > 0
    deferred = symmetric and not options.deterministic and racks is None and repack
    later = _DeferredBound(inst, weights, options, limits, watch) if deferred else None
    try:
        return _solve(
            inst,
            weights,
            options,
            symmetric=symmetric,
            watch=watch,
            limits=limits,
            racks=racks,
            later=later,
        )
    finally:
        if later is not None:
            later.stop()


def _solve(
    inst: Instance,
    weights: Weights,
    options: SolveOptions,
    *,
    symmetric: bool,
    watch: Stopwatch,
    limits: Bounds,
    racks: rack.RackProblem | None,
    later: _DeferredBound | None,
) -> PlacementResult:
    """The solve, with the rack problem prepared and a repack's bound started (solve)."""
    guard = _guard(options)
    method = "cpsat" if symmetric else "plain"
    notes: list[str] = []
    if not symmetric:
        refuse_plain(inst, options)
        # The plain model is the generic baseline (thesis Table 5.3 row 1): it gets the
        # current placement as any solver would, or else Slurm's default schedule
        # (CoreRR), but none of Clavis's own heuristics.
        hint = options.hint or corerr(inst)
    else:
        warm_guard = None if options.deterministic else guard.share(WARM_SHARE)
        hint = warm_start(inst, weights, limits, options.hint, warm_guard)
        if hint is not None and not options.deterministic:
            hint = _calm(inst, weights, limits, hint, options=options, watch=watch)
    # Relaxation bounds (lower.py): cheap, valid whatever the turns below manage.
    floor = lower.lower_bound(inst, weights, limits).F
    start = score(inst, hint, weights, limits) if hint is not None else None
    if start is not None:
        watch.offer(start.F)
        if hint is not None and _proves(floor, start.F):
            # Nothing can beat the start (weights on M alone, a cluster with one way to
            # place): the search would only spend the limit proving it (529 hosts, M
            # alone: 4.8 s of a 5 s limit).
            return _answer(
                watch,
                method=method,
                status="OPTIMAL",
                placed=(hint, start),
                bound=floor,
                notes=notes,
            )
    repack = inst.has_current and weights.M > 0
    deferred = later is not None
    other: Assignment | None = None  # a second start for the host search
    chunked: Assignment | None = None  # the chunk master's rounding, polished apart
    rounding = deferred and start is not None and _rounding_may_pay(weights, start, floor)
    if rounding:
        # The rounding is the host search's second start; CP-SAT keeps the calmed one
        # (32 hosts at 80% of cores, 10 s: from the rounding CP-SAT ended at 0.326-0.330,
        # from the calmed start 0.317-0.321, though the rounding started lower).
        other = _pool_placements(
            inst,
            weights,
            options,
            limits=limits,
            floor=floor,
            hint=None,
            start=None,
            watch=watch,
            beat=start.F if start is not None else None,
        )[1]
    elif symmetric and not options.deterministic and not deferred and racks is None:
        floor, hint, start, other = _pool_placements(
            inst, weights, options, limits=limits, floor=floor, hint=hint, start=start, watch=watch
        )
        window = options.time_limit * CHUNK_SHARE
        floor, chunked = _chunk_rounding(
            inst, weights, limits, floor=floor, start=hint, seconds=window, rounding=True
        )
        if start is not None:
            watch.offer(start.F, floor)
    elif symmetric and not options.deterministic and not deferred:
        # A rack problem places by its own model; the pool raises the floor and, without
        # M, its rounding may be the better start: 32 lone 8-core devils on 211 hosts
        # (weights 5,10,0) kept the warm start's 64-core hosts, F 0.162 for 10 s, where
        # the rounding seats them on 16-core ones, 0.078 (bound 0.076).
        deadline = time.monotonic() + options.time_limit * POOL_BOUND_SHARE
        floor = _pool_bound(inst, weights, limits=limits, floor=floor, deadline=deadline)[0]
        if not repack:
            floor, hint, start, _ = _pool_placements(
                inst,
                weights,
                options,
                limits=limits,
                floor=floor,
                hint=hint,
                start=start,
                watch=watch,
            )
    # F itself as rack configurations (M and drained hosts kept) for the rack turns.
    exact = racks
    if racks is not None and rackmodel.needs_exact(inst):
        exact = rack.prepare(inst, weights, limits, exact=True)
    # The rack-configuration bound proves what CP-SAT's relaxation cannot on large
    # instances. With the rack model it takes a turn among others (_solve_racks), with the
    # per-host model it gets the end of the budget. Deterministic solves skip it (it runs
    # on the wall clock).
    proving = racks is not None and not options.deterministic
    early: rack.BoundResult | None = None
    if racks is not None and exact is not None:
        out, early, hint, start = _solve_racks(
            inst,
            weights,
            options,
            exact,
            relaxed=racks,
            limits=limits,
            hint=hint,
            start=start,
            watch=watch,
        )
    else:
        share = (
            PER_HOST_SHARE_IN_REPACK
            if deferred
            else RACK_SHARE_AFTER_CPSAT
            if proving
            else PER_HOST_SHARE
        )
        turn = guard.until(options.time_limit * (1 - share))
        # A repack small enough for it gets the per-container model: 32 hosts, 10 s,
        # seeds 6-9, F summed over the four 1.004 with the aggregated model, 0.984 so
        # (plain, from the current placement, 0.975). From the current placement rather
        # than the calmed warm start it gained on one seed (0.319 -> 0.285) and lost on
        # others (seed 5 of 1, 2, 4, 5: 0.209 -> 0.227): the warm start stays.
        per_container = deferred and not _too_large(estimate.plain_size(inst), turn, "")
        out = _run_per_host(
            inst,
            weights,
            options,
            limits=limits,
            hint=hint,
            watch=watch,
            guard=turn,
            symmetric=symmetric and not per_container,
        )
    if out.note:
        notes.append(out.note)
    status, assignment, bound = out.status, out.assignment, out.bound
    result = None
    if assignment is not None:
        problems = violations(inst, assignment)
        if problems:  # a decoded answer that breaks a constraint is a bug, never a result
            raise RuntimeError(f"CP-SAT answer fails the checker: {problems[0]}")
        result = score(inst, assignment, weights, limits)
    if hint is not None and start is not None and (result is None or start.F < result.F):
        # CP-SAT has not beaten the warm start within the time limit: keep the warm start.
        assignment, result, status = hint, start, "FEASIBLE"
    if assignment is None or result is None:
        trail = tuple(watch.trajectory)
        return PlacementResult(method, status, None, None, None, watch.elapsed, trail, tuple(notes))
    if symmetric and racks is None and not options.deterministic:
        inline = later is not None and later.aside is None
        assignment, result, status = _host_search(
            inst,
            weights,
            options,
            limits=limits,
            best=(assignment, result, status),
            watch=watch,
            between=later.run if later is not None and inline else None,
            rounding=later.rounding if later is not None and not inline else None,
            other=other,
            second=chunked,
        )
    if later is not None:
        floor = later.finish(floor, notes)
    if early is not None:
        bound = max(bound or 0.0, early.bound)
    elif proving and racks is not None and status != "OPTIMAL":
        left = options.time_limit - watch.elapsed
        if guard.memory_left() < 0:  # RSS between turns: no new turn above the budget
            budget = guard.memory_bytes / GIB
            notes.append(f"rack bound skipped: resident memory above the {budget:.1f} GiB budget")
        elif left >= MIN_BOUND_SECONDS:
            got = rack.rack_bound(
                racks,
                inst,
                weights=weights,
                limits=limits,
                incumbent=result.F,
                time_limit=left,
                seed=assignment,
            )
            if got.assignment is not None and got.F is not None and got.F < result.F:
                assignment, result = got.assignment, score(inst, got.assignment, weights, limits)
            bound = max(bound or 0.0, got.bound)
        else:
            notes.append(f"rack bound skipped: {max(0.0, left):.2f} s left")
    bound = max(bound or 0.0, floor)
    if _proves(bound, result.F):
        status = "OPTIMAL"
    elif status == "OPTIMAL" and not _proves(bound, result.F, RELAXED_OPTIMAL):
        # CP-SAT proved its model, which is a relaxation where a class's hosts differ
        # (per-host watts): 6 hosts, weights 8,8,0, "OPTIMAL" at F 0.1827 over 0.1797.
        status = "FEASIBLE"
    return _answer(
        watch, method=method, status=status, placed=(assignment, result), bound=bound, notes=notes
    )


def _answer(
    watch: Stopwatch,
    *,
    method: str,
    status: Status,
    placed: tuple[Assignment, Score],
    bound: float,
    notes: list[str],
) -> PlacementResult:
    """The solve's result: a placement with its score and bound, the progress so far."""
    watch.offer(placed[1].F, bound)
    return PlacementResult(
        method=method,
        status=status,
        assignment=placed[0],
        score=placed[1],
        bound=bound,
        seconds=watch.elapsed,
        trajectory=tuple(watch.trajectory),
        notes=tuple(notes),
    )
