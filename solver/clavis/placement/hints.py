"""Solution hints for CP-SAT models: complete a hint given on the decision variables."""

from __future__ import annotations

from collections.abc import Iterable

from ortools.sat.python import cp_model

from clavis.placement.guard import Guard, Watchdog


def complete_hint(
    model: cp_model.CpModel,
    decisions: Iterable[cp_model.IntVar],
    time_limit: float,
    guard: Guard | None = None,
) -> bool:
    """Extend a hint on the placement variables to every variable of the model.

    CP-SAT uses a complete, feasible hint as its first solution at once; a partial one
    it must repair by search, which on large instances takes longer than the budget.
    The auxiliary values follow from the placement, so a copy of the model with the
    placement fixed solves by propagation alone. With a ``guard``, copying and fixing
    raise its LimitReachedError, and the propagation stops when it trips.
    """
    hinted = dict(
        zip(model.proto.solution_hint.vars, model.proto.solution_hint.values, strict=True)
    )
    if not hinted:
        return False
    fixed = model.clone()
    fixed.clear_hints()  # type: ignore[no-untyped-call]  # unannotated in ortools
    for x in decisions:
        if guard is not None:
            guard.check()
        fixed.add(fixed.get_int_var_from_proto_index(x.index) == hinted.get(x.index, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    if guard is None:
        code = solver.solve(fixed)
    else:
        solver.parameters.max_time_in_seconds = max(0.01, min(time_limit, guard.left()))
        with Watchdog(solver, guard):
            code = solver.solve(fixed)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return False
    model.clear_hints()  # type: ignore[no-untyped-call]  # unannotated in ortools
    for i in range(len(model.proto.variables)):
        if guard is not None:
            guard.check()
        var = model.get_int_var_from_proto_index(i)
        model.add_hint(var, solver.value(var))
    return True
