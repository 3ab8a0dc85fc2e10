"""Human-readable tables of a placement and its score, and the solution record."""

from __future__ import annotations

from collections import defaultdict

from clavis.instance import Assignment, Instance
from clavis.model import ObjectiveValues, Placement, Solution
from clavis.objectives import Bounds, Objectives, Score, Weights, host_loads
from clavis.placement.result import PlacementResult, SolveOptions

UNITS = {"P": "W", "D": "devil cores", "C": "B/s x cost", "M": "bytes"}


def objective_values(o: Objectives | Weights) -> ObjectiveValues:
    """P, D, C and M (or their weights) as the documents' values."""
    p, d, c, m = o.as_tuple()
    return ObjectiveValues(P=p, D=d, C=c, M=m)


def solution_document(
    inst: Instance,
    result: PlacementResult,
    weights: Weights,
    limits: Bounds,
    options: SolveOptions,
) -> Placement:
    assert result.assignment is not None and result.score is not None
    sol = Solution(
        method=result.method,
        status=result.status,
        seconds=round(result.seconds, 3),
        seed=options.seed,
        time_limit=options.time_limit,
        weights=objective_values(weights),
        raw=objective_values(result.score.raw),
        normalised=objective_values(result.score.normalised),
        lower=objective_values(limits.lo),
        upper=objective_values(limits.hi),
        F=result.score.F,
        bound=result.bound,
        gap=result.gap,
    )
    return inst.placement(result.assignment).model_copy(update={"solution": sol})


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def host_table(inst: Instance, assignment: Assignment) -> str:
    load = host_loads(inst, assignment)
    on: dict[int, list[int]] = defaultdict(list)
    for ci, where in enumerate(assignment):
        on[where].append(ci)
    rows = [["host", "rack", "cores", "containers", "classes"]]
    for hi, h in enumerate(inst.hosts):
        names = ", ".join(inst.containers[c].name for c in on[hi]) or "-"
        kinds = ", ".join("devil" if inst.containers[c].devil else "turtle" for c in on[hi])
        rows.append([h.name, inst.racks[h.rack], f"{load[hi]}/{h.cores}", names, kinds or "-"])
    return _table(rows)


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e6:
        return f"{x:.4g}"
    return f"{x:.2f}" if abs(x) >= 1 else f"{x:.4f}"


def score_table(s: Score, weights: Weights) -> str:
    rows = [["objective", "unit", "raw", "normalised", "weight"]]
    for name, raw, norm, w in zip(
        "PDCM", s.raw.as_tuple(), s.normalised.as_tuple(), weights.as_tuple(), strict=True
    ):
        rows.append([name, UNITS[name], _fmt(raw), f"{norm:.4f}", f"{w:.4f}"])
    return _table(rows)


def summary(result: PlacementResult) -> str:
    head = f"method {result.method}  status {result.status}  time {result.seconds:.2f} s"
    notes = "".join(f"\nnote: {n}" for n in result.notes)
    if result.score is None:
        return head + "  (no placement found)" + notes
    parts = [head, f"F = {result.score.F:.6f}"]
    if result.bound is not None:
        parts.append(f"bound = {result.bound:.6f}")
    if result.gap is not None:
        parts.append(f"gap = {100 * result.gap:.2f}%")
    return "  ".join(parts) + notes
