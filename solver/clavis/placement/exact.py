"""Exact enumeration of every feasible placement, for tiny instances and as a test oracle."""

from __future__ import annotations

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, score
from clavis.placement.result import PlacementResult, SolveOptions, Stopwatch, TooLargeError

MAX_LEAVES = 2_000_000

__all__ = ["TooLargeError", "exact", "feasible_assignments"]


def feasible_assignments(inst: Instance, max_leaves: int = MAX_LEAVES) -> list[Assignment]:
    """Every placement that respects cores capacity (depth-first, capacity-pruned)."""
    n, nh = len(inst.containers), len(inst.hosts)
    if nh**n > max_leaves:
        raise TooLargeError(
            f"{nh} hosts ^ {n} containers = {nh**n} placements is above the exact "
            f"limit of {max_leaves}; use --method cpsat"
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
