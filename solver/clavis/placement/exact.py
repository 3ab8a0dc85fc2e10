"""Exact enumeration of every feasible placement, for tiny instances and as a test oracle."""

from __future__ import annotations

import math

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, score
from clavis.placement.result import PlacementResult, SolveOptions, Stopwatch, TooLargeError

MAX_LEAVES = 2_000_000

__all__ = ["TooLargeError", "exact", "feasible_assignments"]


def feasible_assignments(inst: Instance, max_leaves: int = MAX_LEAVES) -> list[Assignment]:
    """Every placement that respects cores capacity (depth-first, capacity-pruned)."""
    n, nh = len(inst.containers), len(inst.hosts)
    # At scale nh**n has tens of thousands of digits: compare its logarithm first.
    digits = n * math.log10(max(nh, 1))
    if digits > 30 or nh**n > max_leaves:
        count = f"about 10^{digits:.0f}" if digits > 30 else f"{nh**n:,}"
        raise TooLargeError(
            f"{nh} hosts ^ {n} containers = {count} placements is above the exact "
            f"limit of {max_leaves:,}; use --method cpsat"
        )
    free = [h.cores for h in inst.hosts]
    cur = [0] * n
    out: list[Assignment] = []

    def walk(i: int) -> None:
        if i == n:
            out.append(tuple(cur))
            return
        need = inst.containers[i].cores
        for h in range(nh):
            if free[h] >= need and inst.allowed(i, h):
                free[h] -= need
                cur[i] = h
                walk(i + 1)
                free[h] += need

    walk(0)
    return out


def exact(inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
    watch = Stopwatch(options)
    limits = bounds(inst)
    best = None
    best_assignment = None
    for a in feasible_assignments(inst):
        s = score(inst, a, weights, limits)
        if best is None or s.F < best.F - 1e-12:
            best, best_assignment = s, a
            watch.offer(s.F)
    if best is None:
        return PlacementResult("exact", "INFEASIBLE", None, None, None, watch.elapsed)
    return PlacementResult(
        "exact", "OPTIMAL", best_assignment, best, best.F, watch.elapsed, tuple(watch.trajectory)
    )
