"""CP-SAT over rack configurations: how many hosts of each rack run each pattern.

Thesis §5.5.2 branches only into "fundamentally different" hosts. Here that idea is the
model itself: hosts of one class in one rack are interchangeable, and so are the
members of a container group (symmetry.py), so a placement is fully described by the
number of hosts of each (rack, class) that run each pattern (bound.py). On the Table 5.3
instances this is ~1,400 integers for 1,024 hosts instead of ~8,000 per-host counts
and their auxiliaries, and power, shared caches and same-host traffic are linear in it.

With a current placement or drained hosts, the problem must be prepared exact
(``bound.prepare(..., exact=True)``): each host with residents, and each drained host, is
a class of its own, whose cost per pattern adds what it moves of its residents (M is a
sum over current hosts of the bytes each does not keep) and whose patterns keep a
drained host to its residents. Empty hosts stay aggregated.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from clavis.instance import Assignment, Instance
from clavis.placement.bound import RackProblem, host_cost, max_pairs, rack_uses


@dataclass
class RackVars:
    x: dict[tuple[int, int, int], cp_model.IntVar]  # (rack, class, pattern) -> hosts
    n: dict[tuple[int, int], cp_model.IntVar]  # (group, rack) -> members in the rack
    lagging: dict[int, cp_model.IntVar]  # job -> its devils contend somewhere


def needs_exact(inst: Instance) -> bool:
    """The relaxed rack problem (bound.prepare's default) is not F itself here."""
    return inst.has_current or any(h.state == "drain" for h in inst.hosts)


def size(pb: RackProblem) -> int:
    """Configuration variables of the whole rack model."""
    return sum(len(pb.patterns[ci]) for rack in pb.racks for ci in rack)


def _usable(pb: RackProblem) -> dict[int, list[int]]:
    """Per class, the patterns worth a variable: those of groups with members to seat
    (a sub-problem of the rack search holds a few groups only)."""
    absent = [gi for gi, g in enumerate(pb.groups) if g.size == 0]
    out: dict[int, list[int]] = {}
    by_list: dict[int, list[int]] = {}
    for ci in {ci for rack in pb.racks for ci in rack}:
        pats = pb.patterns[ci]
        if id(pats) not in by_list:  # classes of one specification share their list
            by_list[id(pats)] = [
                pi for pi, p in enumerate(pats) if not any(p.counts[gi] for gi in absent)
            ]
        out[ci] = by_list[id(pats)]
    return out


def _ub(v: cp_model.IntVar) -> int:
    return int(list(v.proto.domain)[-1])


def _largest_group(pb: RackProblem) -> int:
    return max(range(len(pb.groups)), key=lambda gi: pb.groups[gi].size)


def build_rack_model(pb: RackProblem) -> tuple[cp_model.CpModel, RackVars]:
    """Minimise F (the same bounds and weights as objectives.py) over rack configurations."""
    model = cp_model.CpModel()
    v = RackVars(x={}, n={}, lagging={})
    v.lagging = {j: model.new_bool_var(f"lagging_{j}") for j in sorted(pb.devil_cores)}
    objective: list[cp_model.LinearExprT] = []
    usable = _usable(pb)
    for r, rack in enumerate(pb.racks):
        members: dict[int, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        for ci, hosts in rack.items():
            here = []
            for pi in usable[ci]:
                p = pb.patterns[ci][pi]
                x = model.new_int_var(0, hosts, f"x_{r}_{ci}_{pi}")
                v.x[r, ci, pi] = x
                here.append(x)
                objective.append(host_cost(pb, ci, p) * x)
                if p.contended:
                    # Straggler rule: a contended host makes each of its devil jobs lag.
                    for j in p.devil_jobs:
                        model.add(x <= hosts * v.lagging[j])
                for gi, k in enumerate(p.counts):
                    if k:
                        members[gi].append((k, x))
            model.add(sum(here) == hosts)
        for gi, g in enumerate(pb.groups):
            room = sum(hosts * (pb.classes[ci].cores // g.cores) for ci, hosts in rack.items())
            n = model.new_int_var(0, min(g.size, room), f"n_{gi}_{r}")
            model.add(n == sum(k * x for k, x in members[gi]))
            v.n[gi, r] = n
    for gi, g in enumerate(pb.groups):
        model.add(sum(v.n[gi, r] for r in range(len(pb.racks))) == g.size)
    objective.extend(_rack_traffic(model, pb, v))
    for j, x in v.lagging.items():
        objective.append(pb.k_d * pb.devil_cores[j] * x)
    _order_identical_racks(model, pb, v)
    model.minimize(sum(objective, start=cp_model.LinearExpr.constant(pb.constant)))
    return model, v


def _rack_traffic(
    model: cp_model.CpModel, pb: RackProblem, v: RackVars
) -> list[cp_model.LinearExprT]:
    if pb.rack_saving == 0:
        return []
    cuts = max_pairs(pb, frozenset())
    out: list[cp_model.LinearExprT] = []
    for (g1, g2), w in pb.rates.items():
        kept = []
        for r in range(len(pb.racks)):
            a, b = v.n[g1, r], v.n[g2, r]
            if g1 == g2:
                top = _ub(a)
                pairs = model.new_int_var(0, top * (top - 1) // 2, f"pairs_{g1}_{r}")
                model.add_element(a, [k * (k - 1) // 2 for k in range(top + 1)], pairs)
                model.add(2 * pairs <= (top - 1) * a)  # secant: see cpsat._same_place_pairs
            else:
                pairs = model.new_int_var(0, _ub(a) * _ub(b), f"pairs_{g1}_{g2}_{r}")
                model.add_multiplication_equality(pairs, [a, b])
            kept.append(pairs)
            out.append(-pb.k_c * pb.rack_saving * w * pairs)
        if g1 == g2:
            model.add(sum(kept) <= cuts[g1])
    return out


def _order_identical_racks(model: cp_model.CpModel, pb: RackProblem, v: RackVars) -> None:
    # Identical racks can be permuted freely; keep only orders where the largest group's
    # count does not grow (hint_counts sorts the same way).
    big = _largest_group(pb)
    for racks in pb.racks_of_type:
        for r1, r2 in itertools.pairwise(racks):
            model.add(v.n[big, r1] >= v.n[big, r2])


def hint_counts(pb: RackProblem, assignment: Assignment) -> dict[tuple[int, int, int], int]:
    """A placement as (rack, class, pattern) -> hosts, racks ordered as the model wants."""
    per_rack = rack_uses(pb, assignment)
    big = _largest_group(pb)

    def key(r: int) -> int:
        return sum(n * pb.patterns[ci][pi].counts[big] for (ci, pi), n in per_rack[r].items())

    out: dict[tuple[int, int, int], int] = {}
    for racks in pb.racks_of_type:
        for slot, r in zip(racks, sorted(racks, key=key, reverse=True), strict=True):
            for (ci, pi), n in per_rack[r].items():
                out[slot, ci, pi] = n
    return out


def per_rack_uses(
    pb: RackProblem, value: dict[tuple[int, int, int], int]
) -> list[tuple[tuple[int, int, int], ...]]:
    out: list[list[tuple[int, int, int]]] = [[] for _ in pb.racks]
    for (r, ci, pi), n in value.items():
        if n:
            out[r].append((ci, pi, n))
    return [tuple(u) for u in out]
