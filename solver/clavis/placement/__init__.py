"""Placement methods behind one interface: ``place(method, instance, weights, options)``."""

from __future__ import annotations

from collections.abc import Callable

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, score
from clavis.placement import baselines, cpsat, exact
from clavis.placement.result import PlacementResult, Progress, SolveOptions, Stopwatch

Method = Callable[[Instance, Weights, SolveOptions], PlacementResult]


def _constructive(name: str, build: Callable[[Instance], Assignment | None]) -> Method:
    def run(inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
        watch = Stopwatch(options)
        a = build(inst)
        if a is None:
            return PlacementResult(name, "INFEASIBLE", None, None, None, watch.elapsed)
        s = score(inst, a, weights)
        watch.offer(s.F)
        return PlacementResult(name, "FEASIBLE", a, s, None, watch.elapsed, tuple(watch.trajectory))

    return run


def _cpsat(inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
    return cpsat.solve(inst, weights, options, symmetric=True)


def _plain(inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
    return cpsat.solve(inst, weights, options, symmetric=False)


METHODS: dict[str, Method] = {
    "cpsat": _cpsat,
    "plain": _plain,
    "random": baselines.random_search,
    "corerr": _constructive("corerr", baselines.corerr),
    "noderr": _constructive("noderr", baselines.noderr),
    "exact": exact.exact,
}


def place(method: str, inst: Instance, weights: Weights, options: SolveOptions) -> PlacementResult:
    try:
        run = METHODS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}") from None
    return run(inst, weights, options)


__all__ = ["METHODS", "PlacementResult", "Progress", "SolveOptions", "place"]
