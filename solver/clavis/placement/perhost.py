"""The per-host CP-SAT model of minimising F (thesis §5.5.2 Solver2D as a constraint model).

Two formulations:
- ``symmetric`` (method ``cpsat``): one integer per (container group, host) counting
  group members on that host, and load ordering inside each type of identical hosts;
- ``plain`` (method ``plain``, thesis Table 5.3 row 1): one boolean per
  (container, host) and no symmetry handling.

Building touches no disk, network or randomness; it reads the clock and the process's
memory only through the optional :class:`~clavis.placement.guard.Guard` it is given, so
that a model too large for the time limit stops being built (issue 12).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Weights, bounds
from clavis.placement.guard import Guard
from clavis.placement.symmetry import (
    Group,
    container_groups,
    host_types,
    pair_rates,
    residents,
)

LinExpr = cp_model.LinearExprT | float  # float terms appear only in the objective


@dataclass
class CpVars:
    """The decision variables and the objective terms of a built model."""

    groups: list[Group]
    y: dict[tuple[int, int], cp_model.IntVar]  # (group, host) -> members on that host
    load: list[LinExpr] = field(default_factory=list)
    terms: dict[str, LinExpr] = field(default_factory=dict)  # raw P, D, C, M


def _check(guard: Guard | None) -> None:
    if guard is not None:
        guard.check()


def _count_vars(
    model: cp_model.CpModel, inst: Instance, groups: list[Group], guard: Guard | None = None
) -> dict[tuple[int, int], cp_model.IntVar]:
    y: dict[tuple[int, int], cp_model.IntVar] = {}
    for gi, g in enumerate(groups):
        for hi, h in enumerate(inst.hosts):
            _check(guard)
            # Members allowed here: all on an up host, those already here on a drained one.
            room = sum(1 for m in g.members if inst.allowed(m, hi))
            ub = min(room, h.cores // g.cores)
            if ub == 1:
                y[gi, hi] = model.new_bool_var(f"y_{gi}_{hi}")
            elif ub > 1:
                y[gi, hi] = model.new_int_var(0, ub, f"y_{gi}_{hi}")
    return y


def _by_group(v: CpVars) -> dict[int, list[tuple[int, cp_model.IntVar]]]:
    out: dict[int, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
    for (gi, hi), x in v.y.items():
        out[gi].append((hi, x))
    return out


def _ub(v: cp_model.IntVar) -> int:
    dom = list(v.proto.domain)
    return int(dom[-1])


def _power(model: cp_model.CpModel, inst: Instance, v: CpVars) -> LinExpr:
    terms: list[LinExpr] = []
    for hi, h in enumerate(inst.hosts):
        used = model.new_bool_var(f"used_{hi}")
        # A host with any load is powered on.
        model.add(v.load[hi] <= h.cores * used)
        terms.append(h.empty_w + (h.idle_w - h.empty_w) * used + h.slope_w * v.load[hi])
    return sum(terms, start=cp_model.LinearExpr.constant(0))


def _contention(
    model: cp_model.CpModel, inst: Instance, v: CpVars, guard: Guard | None = None
) -> LinExpr:
    devil_groups = [gi for gi, g in enumerate(v.groups) if g.devil]
    lagging = {
        g.job: model.new_bool_var(f"lagging_{g.job}") for g in (v.groups[gi] for gi in devil_groups)
    }
    for hi, h in enumerate(inst.hosts):
        _check(guard)
        here = [(gi, v.y[gi, hi]) for gi in devil_groups if (gi, hi) in v.y]
        most = sum(_ub(x) for _, x in here)
        most_cores = sum(_ub(x) * v.groups[gi].cores for gi, x in here)
        if most < 2 or most_cores <= h.devil_tolerance:
            continue  # this host can never be contended
        # many: two or more devil containers; over: devil cores beyond the tolerance.
        many = model.new_bool_var(f"many_{hi}")
        model.add(sum(x for _, x in here) <= 1 + (most - 1) * many)
        over = model.new_bool_var(f"over_{hi}")
        model.add(
            sum(v.groups[gi].cores * x for gi, x in here)
            <= h.devil_tolerance + (most_cores - h.devil_tolerance) * over
        )
        hot = model.new_bool_var(f"hot_{hi}")
        model.add_bool_or([many.Not(), over.Not(), hot])
        for gi, x in here:
            present = x if _ub(x) == 1 else model.new_bool_var(f"present_{gi}_{hi}")
            if present is not x:
                model.add(x <= _ub(x) * present)
            # Straggler rule: one contended devil container makes its whole job lag.
            model.add_bool_or([hot.Not(), present.Not(), lagging[v.groups[gi].job]])
    devil_cores: dict[int, int] = defaultdict(int)
    for g in v.groups:
        if g.devil:
            devil_cores[g.job] += g.cores * g.size
    return sum(
        (devil_cores[j] * b for j, b in lagging.items()), start=cp_model.LinearExpr.constant(0)
    )


def _same_place_pairs(
    model: cp_model.CpModel, a: cp_model.IntVar, b: cp_model.IntVar | None, name: str
) -> LinExpr | None:
    """Upper bound on pairs that share a place: a*b, or a*(a-1)/2 within one group.

    Only an upper bound is needed: the objective rewards co-located pairs, so the
    solver pushes this variable up to the true product.
    """
    if b is None:
        top = _ub(a)
        if top < 2:
            return None
        if top == 2:
            # One pair exactly when both members are here; 2*pair <= a says so linearly.
            pair = model.new_bool_var(name)
            model.add(2 * pair <= a)
            return pair
        pairs = model.new_int_var(0, top * (top - 1) // 2, name)
        model.add_element(a, [k * (k - 1) // 2 for k in range(top + 1)], pairs)
        # Redundant secant of the convex k(k-1)/2: keeps the LP relaxation from
        # crediting more pairs than members. Measured on 573-container instances: the
        # bound rises from 0 to ~0.18 at no cost in F; McCormick rows on products and
        # pair-count rows made presolve slower and F worse, so they are left out.
        model.add(2 * pairs <= (top - 1) * a)
        return pairs
    if _ub(a) == 1 and _ub(b) == 1:
        both = model.new_bool_var(name)
        model.add_implication(both, a)
        model.add_implication(both, b)
        return both
    prod = model.new_int_var(0, _ub(a) * _ub(b), name)
    model.add_multiplication_equality(prod, [a, b])
    return prod


def _traffic_aggregated(
    model: cp_model.CpModel, inst: Instance, v: CpVars, guard: Guard | None = None
) -> LinExpr:
    racks: dict[int, list[int]] = defaultdict(list)
    for hi, h in enumerate(inst.hosts):
        racks[h.rack].append(hi)
    multi_rack = len(racks) > 1
    rack_count: dict[tuple[int, int], cp_model.IntVar] = {}

    def in_rack(gi: int, r: int) -> cp_model.IntVar | None:
        if (gi, r) not in rack_count:
            here = [v.y[gi, hi] for hi in racks[r] if (gi, hi) in v.y]
            if not here:
                return None
            top = min(v.groups[gi].size, sum(_ub(x) for x in here))
            rack_count[gi, r] = model.new_int_var(0, top, f"rack_{gi}_{r}")
            model.add(rack_count[gi, r] == sum(here))
        return rack_count[gi, r]

    total: list[LinExpr] = []
    cx, cr = inst.cross_rack_cost, inst.same_rack_cost
    for (g1, g2), w in pair_rates(inst, v.groups).items():
        n1, n2 = v.groups[g1].size, v.groups[g2].size
        all_pairs = n1 * (n1 - 1) // 2 if g1 == g2 else n1 * n2
        host_pairs: list[LinExpr] = []
        for hi in range(len(inst.hosts)):
            _check(guard)
            if (g1, hi) in v.y and (g2, hi) in v.y:
                p = _same_place_pairs(
                    model, v.y[g1, hi], None if g1 == g2 else v.y[g2, hi], f"sh_{g1}_{g2}_{hi}"
                )
                if p is not None:
                    host_pairs.append(p)
        same_host = sum(host_pairs, start=cp_model.LinearExpr.constant(0))
        if not multi_rack:
            total.append(w * cr * (all_pairs - same_host))
            continue
        rack_pairs: list[LinExpr] = []
        for r in racks:
            _check(guard)
            a, b = in_rack(g1, r), in_rack(g2, r)
            if a is None or b is None:
                continue
            p = _same_place_pairs(model, a, None if g1 == g2 else b, f"sr_{g1}_{g2}_{r}")
            if p is not None:
                rack_pairs.append(p)
        same_rack = sum(rack_pairs, start=cp_model.LinearExpr.constant(0))
        # cost = cx*(cross-rack pairs) + cr*(same-rack, other-host pairs)
        total.append(w * (cx * all_pairs - (cx - cr) * same_rack - cr * same_host))
    return sum(total, start=cp_model.LinearExpr.constant(0))


def _traffic_plain(
    model: cp_model.CpModel, inst: Instance, v: CpVars, guard: Guard | None = None
) -> LinExpr:
    """Naive encoding: each container's host index and rack index, one test per flow."""
    flows = inst.all_flows()
    if not flows:
        return cp_model.LinearExpr.constant(0)
    where: list[cp_model.IntVar] = []
    rack: list[cp_model.IntVar] = []
    by_group = _by_group(v)
    for ci in range(len(inst.containers)):
        _check(guard)
        on = by_group[ci]
        h = model.new_int_var(0, len(inst.hosts) - 1, f"host_{ci}")
        model.add(h == sum(hi * x for hi, x in on))
        r = model.new_int_var(0, len(inst.racks) - 1, f"rackof_{ci}")
        model.add(r == sum(inst.hosts[hi].rack * x for hi, x in on))
        where.append(h)
        rack.append(r)
    total: list[LinExpr] = []
    cx, cr = inst.cross_rack_cost, inst.same_rack_cost
    for k, f in enumerate(flows):
        _check(guard)
        sh = model.new_bool_var(f"sh_{k}")
        model.add(where[f.a] == where[f.b]).only_enforce_if(sh)
        sr = model.new_bool_var(f"sr_{k}")
        model.add(rack[f.a] == rack[f.b]).only_enforce_if(sr)
        model.add_implication(sh, sr)
        total.append(f.bytes_per_s * (cx - (cx - cr) * sr - cr * sh))
    return sum(total, start=cp_model.LinearExpr.constant(0))


def _migration(model: cp_model.CpModel, inst: Instance, v: CpVars) -> LinExpr:
    """Bytes moved: per group and current host, the residents' bytes minus those kept.

    A host keeping ``s`` members of a group keeps at best its ``s`` largest residents,
    and decode keeps exactly those (members are listed largest first). One boolean per
    resident, largest first, says it stays; the ordering makes the true ones a prefix,
    so kept bytes are exactly the prefix sum the evaluator sees (objectives.migration).
    Booleans rather than one kept-bytes integer: CP-SAT scales a float objective to
    integers, and a variable spanning 10^10 bytes cost it the precision to prove optima.
    """
    if not inst.has_current:
        return cp_model.LinearExpr.constant(0)
    moved: list[LinExpr] = []
    for gi, g in enumerate(v.groups):
        for hi, memories in residents(inst, g).items():
            total = sum(memories)
            if (gi, hi) not in v.y:
                moved.append(cp_model.LinearExpr.constant(total))
                continue
            if len(set(memories)) == 1:
                stay = model.new_int_var(0, len(memories), f"stay_{gi}_{hi}")
                # Members stay only where the group keeps containers.
                model.add(stay <= v.y[gi, hi])
                moved.append(memories[0] * (len(memories) - stay))
                continue
            kept = [model.new_bool_var(f"stay_{gi}_{hi}_{j}") for j in range(len(memories))]
            model.add(sum(kept) <= v.y[gi, hi])
            for a, b in itertools.pairwise(kept):
                model.add_implication(b, a)  # the largest residents stay first
            moved.append(total - sum(m * k for m, k in zip(memories, kept, strict=True)))
    return sum(moved, start=cp_model.LinearExpr.constant(0))


def _order_identical_hosts(model: cp_model.CpModel, v: CpVars, types: list[list[int]]) -> None:
    # Why: permuting identical hosts maps a placement to one with the same objectives, so
    # keeping only placements whose loads are non-increasing inside each type loses no
    # optimum and removes up to k! copies of every solution.
    for members in types:
        for h1, h2 in itertools.pairwise(members):
            model.add(v.load[h1] >= v.load[h2])


def canonical(inst: Instance, groups: list[Group], assignment: Assignment) -> Assignment:
    """Relabel identical hosts so the assignment satisfies the load ordering (for hints)."""
    load = [0] * len(inst.hosts)
    for c, h in zip(inst.containers, assignment, strict=True):
        load[h] += c.cores
    relabel = list(range(len(inst.hosts)))
    for members in host_types(inst, groups):
        by_load = sorted(members, key=lambda h: -load[h])
        for slot, h in zip(members, by_load, strict=True):
            relabel[h] = slot
    return tuple(relabel[h] for h in assignment)


def build_model(
    inst: Instance,
    weights: Weights,
    limits: Bounds | None = None,
    *,
    symmetric: bool = True,
    hint: Assignment | None = None,
    groups: list[Group] | None = None,
    guard: Guard | None = None,
) -> tuple[cp_model.CpModel, CpVars]:
    """The CP-SAT model of minimising F over placements; no disk or randomness.

    With a ``guard``, building raises OutOfTimeError or OutOfMemoryError once the deadline
    passes or the process goes over its memory budget (nothing is half-returned).
    """
    limits = limits or bounds(inst)
    model = cp_model.CpModel()
    if groups is None:
        groups = container_groups(inst, aggregate=symmetric)
    v = CpVars(groups=groups, y=_count_vars(model, inst, groups, guard))
    # Every container is placed exactly once.
    by_group = _by_group(v)
    for gi, g in enumerate(groups):
        model.add(sum(x for _, x in by_group[gi]) == g.size)
    # Cores capacity of each host.
    on_host: dict[int, list[LinExpr]] = defaultdict(list)
    for (gi, hi), x in v.y.items():
        on_host[hi].append(groups[gi].cores * x)
    for hi, h in enumerate(inst.hosts):
        v.load.append(sum(on_host[hi], start=cp_model.LinearExpr.constant(0)))
        model.add(v.load[hi] <= h.cores)
    v.terms["P"] = _power(model, inst, v)
    v.terms["D"] = _contention(model, inst, v, guard)
    v.terms["C"] = (_traffic_aggregated if symmetric else _traffic_plain)(model, inst, v, guard)
    v.terms["M"] = _migration(model, inst, v)
    coefs, offset = limits.linear(weights)
    model.minimize(
        sum(
            (k * v.terms[name] for k, name in zip(coefs, "PDCM", strict=True) if k),
            start=cp_model.LinearExpr.constant(offset),
        )
    )
    if symmetric:
        _order_identical_hosts(model, v, host_types(inst, groups))
    if hint is not None:
        if symmetric:
            hint = canonical(inst, groups, hint)
        counts: dict[tuple[int, int], int] = defaultdict(int)
        group_of = {m: gi for gi, g in enumerate(groups) for m in g.members}
        for ci, hi in enumerate(hint):
            counts[group_of[ci], hi] += 1
        for key, x in v.y.items():
            model.add_hint(x, counts.get(key, 0))
    return model, v


def decode(inst: Instance, v: CpVars, value: dict[tuple[int, int], int]) -> Assignment:
    """Counts per (group, host) -> a host per container, keeping members where they are
    (largest first: the members' order, which _migration's kept bytes assume)."""
    out = [-1] * len(inst.containers)
    for gi, g in enumerate(v.groups):
        free = {hi: value.get((gi, hi), 0) for hi in range(len(inst.hosts))}
        rest = []
        for m in g.members:
            h = inst.current[m]
            if h is not None and free.get(h, 0) > 0:
                out[m] = h
                free[h] -= 1
            else:
                rest.append(m)
        slots = [hi for hi, k in free.items() for _ in range(k)]
        for m, hi in zip(rest, slots, strict=True):
            out[m] = hi
    return tuple(out)
