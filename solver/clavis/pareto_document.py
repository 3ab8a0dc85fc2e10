"""A search's archive as a front document (docs/schema/front.schema.json): what `clavis
pareto` writes and what clavisd stores after a run it started (docs/calibration.md)."""

from __future__ import annotations

from typing import Literal

from clavis.instance import Instance
from clavis.model import (
    Cluster,
    Front,
    FrontPoint,
    FrontSearch,
    ObjectiveValues,
    Placement,
    Workload,
)
from clavis.objectives import Objectives
from clavis.pareto import FrontResult, PlacementProblem


def values(o: Objectives) -> ObjectiveValues:
    return ObjectiveValues(P=o.P, D=o.D, C=o.C, M=o.M)


def front_document(
    problem: PlacementProblem,
    result: FrontResult,
    *,
    cluster: Cluster,
    workload: Workload,
    current: Placement | None,
    algorithm: Literal["nsga2", "nsga3", "smsemoa"],
    population: int,
    seed: int,
    seed_time: float,
    seconds: float,
) -> Front | None:
    """The front with every schedule's placement and raw and normalised values, and the
    settings that found it; None when no feasible placement was found."""
    inst: Instance = problem.inst
    points = []
    for k, row in enumerate(result.X):
        assignment = tuple(int(h) for h in row)
        raw, norm = problem.objectives(assignment)
        points.append(
            FrontPoint(
                id=k,
                assignment=inst.placement(assignment).assignment,
                raw=values(raw),
                normalised=values(norm),
            )
        )
    if not points:
        return None
    return Front(
        cluster=cluster,
        workload=workload,
        current=current,
        search=FrontSearch(
            algorithm=algorithm,
            population=population,
            generations=result.generations,
            seed=seed,
            seed_time=seed_time,
            objectives=list(problem.names),
            evaluations=result.evaluations,
            hypervolume=result.hypervolume,
            seconds=round(seconds, 3),
        ),
        lower=values(problem.limits.lo),
        upper=values(problem.limits.hi),
        points=points,
    )
