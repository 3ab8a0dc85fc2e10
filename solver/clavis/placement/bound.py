"""A joint lower bound on F by rack configurations (thesis §5.5.2, elaborate bounding).

The thesis bounds P, D and C *jointly*: it enumerates how many turtle/turtle and
devil/turtle pairs the remaining containers form and estimates all three goals for
each case, instead of adding three independent estimates (naive bounding). The CP-SAT
model's own bound is naive in that sense: its linear relaxation prices power, shared
caches and rack locality separately, and on large instances proves gaps of 35-70%
although its answers are near the best known.

This module makes the joint estimate exact in its linear relaxation:

* A *pattern* is what one host runs: a count per container group (symmetry.py). Its
  power, whether its devils contend, and the traffic it keeps inside the host follow
  from the pattern alone.
* A *rack configuration* is a pattern per host of one rack. Its same-rack traffic
  follows from the configuration alone (group counts in the rack).
* F is then the sum of the configurations' costs plus constants, and choosing one
  configuration per rack with every container covered once is the whole problem. Its
  linear relaxation over all configurations (Dantzig-Wolfe) is solved by column
  generation; the pricing problem (best configuration of one rack for given duals) is a
  small CP-SAT model. Every pricing round gives a valid Lagrangian bound
  ``pi . sizes + sum over racks of min(cost - pi . counts)``, so stopping early is safe.
* The straggler rule (one contended devil makes its whole job lag) is a fixed charge
  per job; it is handled by branching on jobs, as the thesis enumerates its (tt, dt)
  cases: a job either lags (its devil cores are charged) or does not (its devils may
  not sit on a contended host). Undecided jobs may contend for free, which relaxes.

Migration cost is left out (M >= 0, so the bound stays valid); drained hosts are
treated as up (a larger feasible set, so a valid bound). ``prepare(..., exact=True)``
keeps both, for the rack search and model with a current placement. Instances whose hosts admit too
many patterns (small containers, many groups) get no bound from here.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model
from scipy.optimize import Bounds as VarBounds
from scipy.optimize import LinearConstraint, linprog, milp
from scipy.sparse import lil_matrix

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Weights, score, violations
from clavis.placement.symmetry import Group, container_groups, pair_rates, residents, stay_bytes

MAX_PATTERNS = 4000  # per host class; beyond this the enumeration costs more than it proves
GRID_TOTAL = 2.0**52  # pricing objectives stay below this on their integer grid (_price)
# Cost of an uncovered container in the restricted master. F spans about 1, so no
# container is worth more; the Lagrangian bound is valid whatever this is, it only sets
# how fast column generation leaves the artificial start (1e6 made pricing crawl).
BIG = 10.0
PRICE_SECONDS = 3.0  # most one pricing call may take; its proven bound is used if cut
DIVES = 4  # branches of the bound that a dive starts from (the lowest bounds first)


@dataclass(frozen=True)
class HostClass:
    """Hosts that every objective treats alike, wherever they are.

    In an exact problem (``prepare(..., exact=True)``) a host with current residents or
    a drained host is a class of its own kind: M depends on what it keeps of its
    residents, and a drained host may keep them but take no one else.
    """

    cores: int
    tolerance: int
    idle_w: float
    slope_w: float
    empty_w: float
    residents: tuple[tuple[int, tuple[int, ...]], ...] = ()  # group -> memories, largest first
    drained: bool = False

    def moved(self, counts: tuple[int, ...]) -> int:
        """Bytes of residents that leave when the host runs ``counts`` (the largest stay:
        symmetry.stay_bytes, as every decoder keeps them)."""
        return sum(sum(mems) - stay_bytes(mems, counts[gi]) for gi, mems in self.residents)

    def admits(self, counts: tuple[int, ...]) -> bool:
        """A drained host keeps some of its residents and takes no one else."""
        if not self.drained:
            return True
        most = {gi: len(mems) for gi, mems in self.residents}
        return all(k <= most.get(gi, 0) for gi, k in enumerate(counts) if k)


@dataclass(frozen=True)
class Pattern:
    counts: tuple[int, ...]  # members of each group on the host
    cores: int
    contended: bool
    devil_jobs: frozenset[int]  # jobs with a devil container in this pattern


@dataclass
class RackProblem:
    """The instance seen as groups, host classes, racks and linear objective weights."""

    groups: list[Group]
    classes: list[HostClass]
    patterns: list[list[Pattern]]  # per class
    rack_types: list[tuple[tuple[int, int], ...]]  # per type: (class, hosts) pairs
    rack_counts: list[int]  # racks of each type
    rates: dict[tuple[int, int], float]  # (g1 <= g2) -> bytes/s between two members
    k_p: float
    k_d: float
    k_c: float
    same_host_cost: float  # cost a flow avoids when it stays inside a host
    rack_saving: float  # extra cost a flow avoids when it stays inside a rack
    constant: float  # F of everything that does not depend on the placement
    devil_cores: dict[int, int]  # job -> devil cores
    racks_of_type: list[list[int]]  # per rack type: its racks (indices into racks)
    racks: list[Counter[int]] = field(default_factory=list)  # per rack: class -> host count
    rack_hosts: list[dict[int, list[int]]] = field(default_factory=list)  # class -> hosts
    k_m: float = 0.0  # weight of M per byte; 0 in the bound's relaxation (M >= 0 left out)


@dataclass(frozen=True)
class Column:
    rack_type: int
    counts: tuple[int, ...]  # group members in the rack
    patterns: tuple[tuple[int, int, int], ...]  # (class, pattern, hosts)
    cost: float


@dataclass
class BoundResult:
    bound: float  # valid lower bound on F
    proven_optimal: bool  # the incumbent is optimal (bound >= incumbent)
    nodes: int
    columns: int
    seconds: float
    note: str = ""
    assignment: Assignment | None = None  # a placement found on the way, if better
    F: float | None = None  # its F


@dataclass(order=True)
class _Node:
    bound: float
    seq: int
    lagging: frozenset[int] = field(compare=False)
    calm: frozenset[int] = field(compare=False)  # jobs that may not contend
    used: list[tuple[Column, float]] = field(compare=False)  # relaxed solution


def _too_many(groups: list[Group], cores: int) -> bool:
    """More than MAX_PATTERNS count vectors fit ``cores``? Counted by dynamic programming
    over the groups (ways[c]: vectors using c cores), which stops as soon as the count
    passes the limit: on real snapshots after a few dozen of thousands of groups, where
    listing them took seconds of a 10 s budget (measured at 1,024 hosts)."""
    ways = [1] + [0] * cores
    for g in groups:
        if g.cores > cores:
            continue
        new = list(ways)
        for k in range(1, g.size + 1):
            step = k * g.cores
            if step > cores:
                break
            for c in range(step, cores + 1):
                new[c] += ways[c - step]
        ways = [min(w, MAX_PATTERNS + 1) for w in new]
        if sum(ways) > MAX_PATTERNS:
            return True
    return False


def _patterns(groups: list[Group], hc: HostClass) -> list[Pattern] | None:
    """Every count vector of groups that fits one host of ``hc``, the empty one first;
    None beyond MAX_PATTERNS. Depth-first with an explicit stack: real snapshots have
    thousands of groups (ring and stencil jobs are singletons), deeper than Python's
    recursion limit."""
    if _too_many(groups, hc.cores):
        return None
    fits = [gi for gi, g in enumerate(groups) if g.cores <= hc.cores]
    out: list[Pattern] = []
    # (position in fits, cores left, counts so far as (group, count) pairs)
    stack: list[tuple[int, int, tuple[tuple[int, int], ...]]] = [(0, hc.cores, ())]
    while stack:
        pos, left, chosen = stack.pop()
        if pos == len(fits):
            out.append(_pattern(groups, hc, chosen))
            continue
        g = groups[fits[pos]]
        # Pushed largest count first, so that fewer members come out first (the
        # all-zero pattern is number 0: _empty_columns relies on it).
        for k in range(min(g.size, left // g.cores), -1, -1):
            stack.append((pos + 1, left - k * g.cores, (*chosen, (fits[pos], k)) if k else chosen))
    return out


def _pattern(groups: list[Group], hc: HostClass, chosen: tuple[tuple[int, int], ...]) -> Pattern:
    """The pattern running k members of each (group, k) in ``chosen``."""
    counts = [0] * len(groups)
    for gi, k in chosen:
        counts[gi] = k
    devil = [(groups[gi], k) for gi, k in chosen if groups[gi].devil]
    devil_cores = sum(k * g.cores for g, k in devil)
    return Pattern(
        counts=tuple(counts),
        cores=sum(k * groups[gi].cores for gi, k in chosen),
        # objectives.contended_hosts: two or more devils whose cores exceed the tolerance
        contended=sum(k for _, k in devil) >= 2 and devil_cores > hc.tolerance,
        devil_jobs=frozenset(g.job for g, _ in devil),
    )


def _pairs(counts: tuple[int, ...], g1: int, g2: int) -> int:
    if g1 == g2:
        return counts[g1] * (counts[g1] - 1) // 2
    return counts[g1] * counts[g2]


def prepare(
    inst: Instance, weights: Weights, limits: Bounds, *, exact: bool = False
) -> RackProblem | None:
    """The instance as groups, host classes and rack types; None when a host class admits
    more than MAX_PATTERNS patterns (the bound does not apply).

    By default M is left out and drained hosts count as up: a relaxation, valid for the
    bound. ``exact`` keeps both (HostClass.residents and .drained), so that F of every
    rack configuration is the evaluator's, M included: the rack search's problem when
    there is a current placement or a drained host.
    """
    groups = container_groups(inst, aggregate=True)
    (k_p, k_d, k_c, k_m), offset = limits.linear(weights)
    here: dict[int, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
    if exact:
        for gi, g in enumerate(groups):
            for hi, mems in residents(inst, g).items():
                here[hi].append((gi, mems))
    class_of: dict[HostClass, int] = {}
    racks: dict[int, Counter[int]] = defaultdict(Counter)
    members: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    constant = offset
    for hi, h in enumerate(inst.hosts):
        if h.state == "down":  # never runs anything: its empty watts are a constant
            constant += k_p * h.empty_w
            continue
        hc = HostClass(
            h.cores,
            h.devil_tolerance,
            h.idle_w,
            h.slope_w,
            h.empty_w,
            tuple(here[hi]),
            exact and h.state == "drain",
        )
        ci = class_of.setdefault(hc, len(class_of))
        racks[h.rack][ci] += 1
        members[h.rack][ci].append(hi)
    classes = list(class_of)
    patterns = []
    # Patterns depend on the specification alone: classes that differ only in residents
    # share one list (a drained host's is the part of it that it admits).
    made: dict[HostClass, list[Pattern] | None] = {}
    for hc in classes:
        spec = dataclasses.replace(hc, residents=(), drained=False)
        if spec not in made:
            made[spec] = _patterns(groups, spec)
        pats = made[spec]
        if pats is None:
            return None
        patterns.append([p for p in pats if hc.admits(p.counts)] if hc.drained else pats)
    kinds = Counter(tuple(sorted(c.items())) for c in racks.values())
    kind_index = {k: i for i, k in enumerate(kinds)}
    racks_of_type: list[list[int]] = [[] for _ in kinds]
    for r, c in enumerate(racks.values()):
        racks_of_type[kind_index[tuple(sorted(c.items()))]].append(r)
    rates = pair_rates(inst, groups)
    total = sum(inst.job_traffic)
    multi_rack = len({h.rack for h in inst.hosts}) > 1
    cr, cx = inst.same_rack_cost, inst.cross_rack_cost
    # C = sum_flows w * (worst - (worst - cr) * same_rack - cr * same_host), with
    # worst = cx on several racks and cr on one (same_rack is then always true).
    worst = cx if multi_rack else cr
    devil_cores: dict[int, int] = defaultdict(int)
    for g in groups:
        if g.devil:
            devil_cores[g.job] += g.cores * g.size
    return RackProblem(
        groups=groups,
        classes=classes,
        patterns=patterns,
        rack_types=list(kinds),
        rack_counts=list(kinds.values()),
        rates=rates,
        k_p=k_p,
        k_d=k_d,
        k_c=k_c,
        same_host_cost=cr,
        rack_saving=(cx - cr) if multi_rack else 0.0,
        constant=constant + k_c * worst * total,
        devil_cores=dict(devil_cores),
        racks_of_type=racks_of_type,
        racks=list(racks.values()),
        rack_hosts=[dict(members[r]) for r in racks],
        k_m=k_m if exact else 0.0,
    )


def max_pairs(pb: RackProblem, calm: frozenset[int]) -> dict[int, int]:
    """Most same-rack pairs each talking group can have: fill the roomiest racks first.

    The sum of n_r (n_r - 1) / 2 under sum n_r = size and n_r <= room_r is convex, so it
    peaks with racks filled in order of room. These cuts keep the linear relaxation from
    crediting a fractional rack full of one job (a job of 103 on racks of 64 keeps at
    most 2016 + 741 pairs, not 103 * 63 / 2). A devil group of a job that may not
    contend has at most one container per host unless a few fit within the tolerance.
    """
    if pb.rack_saving == 0:
        return {}
    out: dict[int, int] = {}
    for gi, g in enumerate(pb.groups):
        if (gi, gi) not in pb.rates:
            continue
        rooms = sorted((_room(pb, g, rack, calm) for rack in pb.racks), reverse=True)
        left, pairs = g.size, 0
        for room in rooms:
            take = min(left, room)
            pairs += take * (take - 1) // 2
            left -= take
        out[gi] = pairs
    return out


def _room(pb: RackProblem, g: Group, rack: Counter[int], calm: frozenset[int]) -> int:
    room = 0
    for ci, hosts in rack.items():
        hc = pb.classes[ci]
        most = hc.cores // g.cores
        if g.devil and g.job in calm and most * g.cores > hc.tolerance:
            # two or more devils above the tolerance contend (objectives.contended_hosts)
            most = max(k for k in range(most + 1) if k < 2 or k * g.cores <= hc.tolerance)
        room += hosts * most
    return room


@dataclass(frozen=True)
class Duals:
    groups: np.ndarray  # per group: coverage
    racks: np.ndarray  # per rack type: convexity
    pairs: dict[int, float]  # per group with a pair cut: its dual (<= 0)

    def reduced(self, col: Column) -> float:
        pairs = sum(d * (col.counts[g] * (col.counts[g] - 1) // 2) for g, d in self.pairs.items())
        covered = float(np.dot(self.groups, col.counts))
        return col.cost - covered - float(self.racks[col.rack_type]) - pairs


def host_cost(pb: RackProblem, ci: int, p: Pattern) -> float:
    hc = pb.classes[ci]
    watts = hc.empty_w if p.cores == 0 else hc.idle_w + hc.slope_w * p.cores
    kept = sum(w * _pairs(p.counts, g1, g2) for (g1, g2), w in pb.rates.items())
    moved = hc.moved(p.counts) if hc.residents and pb.k_m else 0
    return pb.k_p * watts - pb.k_c * pb.same_host_cost * kept + pb.k_m * moved


def rack_cost(pb: RackProblem, counts: tuple[int, ...]) -> float:
    kept = sum(w * _pairs(counts, g1, g2) for (g1, g2), w in pb.rates.items())
    return -pb.k_c * pb.rack_saving * kept


def _allowed(p: Pattern, calm: frozenset[int]) -> bool:
    return not (p.contended and p.devil_jobs & calm)


def _price(
    pb: RackProblem, rt: int, duals: Duals, calm: frozenset[int], time_limit: float
) -> tuple[Column | None, float]:
    """Best configuration of one rack of type ``rt`` for the duals, and a valid lower
    bound on its reduced cost without the rack-type dual (``Duals.reduced`` adds it).

    Costs are floored onto an integer grid for CP-SAT: every term gets no larger and all
    variables are non-negative, so CP-SAT's bound on the grid is a bound on the truth.
    """
    model = cp_model.CpModel()
    raw: list[tuple[float, cp_model.IntVar]] = []
    n_expr: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in pb.groups]
    chosen: list[tuple[int, int, cp_model.IntVar]] = []
    for ci, hosts in pb.rack_types[rt]:
        xs = []
        for pi, p in enumerate(pb.patterns[ci]):
            if not _allowed(p, calm):
                continue
            x = model.new_int_var(0, hosts, f"x_{ci}_{pi}")
            xs.append(x)
            chosen.append((ci, pi, x))
            raw.append((host_cost(pb, ci, p) - float(np.dot(duals.groups, p.counts)), x))
            for gi, k in enumerate(p.counts):
                if k:
                    n_expr[gi].append((k, x))
        model.add(sum(xs) == hosts)
    counts: list[cp_model.IntVar] = []
    for gi, g in enumerate(pb.groups):
        room = sum(hosts * (pb.classes[ci].cores // g.cores) for ci, hosts in pb.rack_types[rt])
        n = model.new_int_var(0, min(g.size, room), f"n_{gi}")
        model.add(n == sum(k * x for k, x in n_expr[gi]))
        counts.append(n)
    if pb.rack_saving > 0:
        for (g1, g2), w in pb.rates.items():
            a = counts[g1]
            top = int(list(a.proto.domain)[-1])
            pair = model.new_int_var(0, top * top, f"pairs_{g1}_{g2}")
            if g1 == g2:
                model.add_element(a, [k * (k - 1) // 2 for k in range(top + 1)], pair)
            else:
                model.add_multiplication_equality(pair, [a, counts[g2]])
            raw.append((-pb.k_c * pb.rack_saving * w - duals.pairs.get(g1, 0.0) * (g1 == g2), pair))
    # One grid step for the whole objective, so that its largest value fits CP-SAT's
    # 64-bit arithmetic with room to spare.
    largest = sum(abs(c) * int(list(x.proto.domain)[-1]) for c, x in raw) or 1.0
    scale = 2.0 ** math.floor(math.log2(GRID_TOTAL / largest))
    terms = [(math.floor(c * scale), x) for c, x in raw]
    model.minimize(sum(c * x for c, x in terms))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, time_limit)
    solver.parameters.num_workers = 1
    code = solver.solve(model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, -math.inf
    floor_bound = solver.best_objective_bound / scale
    picks = tuple((ci, pi, int(solver.value(x))) for ci, pi, x in chosen if solver.value(x))
    rack_counts = tuple(int(solver.value(n)) for n in counts)
    cost = sum(n * host_cost(pb, ci, pb.patterns[ci][pi]) for ci, pi, n in picks)
    cost += rack_cost(pb, rack_counts)
    return Column(rt, rack_counts, picks, cost), floor_bound


def _master(
    pb: RackProblem, columns: list[Column], cuts: dict[int, int]
) -> tuple[float, Duals, np.ndarray] | None:
    """Restricted master LP: value, duals, column values."""
    ng, nt, nc = len(pb.groups), len(pb.rack_types), len(columns)
    # variables: columns, then uncovered (+) and over-covered (-) slack per group
    c = np.concatenate([[col.cost for col in columns], np.full(2 * ng, BIG)])
    a = np.zeros((ng + nt, nc + 2 * ng))
    for j, col in enumerate(columns):
        a[:ng, j] = col.counts
        a[ng + col.rack_type, j] = 1.0
    a[:ng, nc : nc + ng] = np.eye(ng)
    a[:ng, nc + ng :] = -np.eye(ng)
    b = np.concatenate([[g.size for g in pb.groups], pb.rack_counts])
    cut_groups = sorted(cuts)
    a_ub = np.zeros((len(cut_groups), nc + 2 * ng))
    for row, gi in enumerate(cut_groups):
        for j, col in enumerate(columns):
            a_ub[row, j] = col.counts[gi] * (col.counts[gi] - 1) // 2
    b_ub = np.array([cuts[gi] for gi in cut_groups], dtype=float)
    res = linprog(
        c,
        A_ub=a_ub if cut_groups else None,
        b_ub=b_ub if cut_groups else None,
        A_eq=a,
        b_eq=b,
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        return None
    eq = np.asarray(res.eqlin.marginals)
    ub = np.asarray(res.ineqlin.marginals) if cut_groups else np.zeros(0)
    duals = Duals(
        groups=eq[:ng],
        racks=eq[ng:],
        pairs={gi: min(0.0, float(d)) for gi, d in zip(cut_groups, ub, strict=True)},
    )
    return float(res.fun), duals, np.asarray(res.x[:nc])


def _node_bound(
    pb: RackProblem,
    pool: list[Column],
    calm: frozenset[int],
    lagging: frozenset[int],
    deadline: float,
) -> tuple[float, list[tuple[Column, float]]]:
    """Column generation for one branch: the best Lagrangian bound found and the final
    master solution (columns with positive value)."""
    charge = pb.constant + pb.k_d * sum(pb.devil_cores[j] for j in lagging)
    cuts = max_pairs(pb, calm)
    columns = [col for col in pool if _columns_allowed(pb, col, calm)] + _empty_columns(pb)
    best = -math.inf
    used: list[tuple[Column, float]] = []
    sizes = np.array([g.size for g in pb.groups], dtype=float)
    for _round in range(500):
        master = _master(pb, columns, cuts)
        now = time.monotonic()
        if master is None or now >= deadline:
            break
        value, duals, x = master
        used = [(col, v) for col, v in zip(columns, x, strict=True) if v > 1e-9]
        # Lagrangian bound (module docstring); the pair cuts hold for every placement
        # and their duals are <= 0, so sigma . cuts keeps it valid.
        lagrange = float(np.dot(duals.groups, sizes))
        lagrange += sum(d * cuts[g] for g, d in duals.pairs.items())
        added = False
        per_type = (deadline - now) / max(1, len(pb.rack_types))
        for rt in range(len(pb.rack_types)):
            col, low = _price(pb, rt, duals, calm, min(per_type, PRICE_SECONDS))
            lagrange += pb.rack_counts[rt] * low
            if col is not None:
                red = duals.reduced(col)
                if red < -1e-9 * max(1.0, abs(value)):
                    columns.append(col)
                    pool.append(col)
                    added = True
        best = max(best, lagrange)
        if not added or value - lagrange <= 1e-7 * max(1.0, abs(value)):
            break
    return charge + best, used


def _columns_allowed(pb: RackProblem, col: Column, calm: frozenset[int]) -> bool:
    return all(_allowed(pb.patterns[ci][pi], calm) for ci, pi, _ in col.patterns)


def _contending_jobs(pb: RackProblem, used: list[tuple[Column, float]]) -> Counter[int]:
    """Devil cores the relaxed solution puts on contended hosts, per job."""
    weight: Counter[int] = Counter()
    for col, v in used:
        for ci, pi, n in col.patterns:
            p = pb.patterns[ci][pi]
            if p.contended:
                for j in p.devil_jobs:
                    weight[j] += round(v * n * 1000)
    return weight


def _empty_columns(pb: RackProblem) -> list[Column]:
    out = []
    for rt, kinds in enumerate(pb.rack_types):
        empty = tuple((ci, 0, hosts) for ci, hosts in kinds)  # pattern 0: the empty host
        cost = sum(n * host_cost(pb, ci, pb.patterns[ci][0]) for ci, _, n in empty)
        out.append(Column(rt, (0,) * len(pb.groups), empty, cost))
    return out


def integer_schedule(
    pb: RackProblem, inst: Instance, pool: list[Column], time_limit: float
) -> Assignment | None:
    """The best placement made of generated rack configurations (price and branch).

    An integer program over the columns column generation produced, with the straggler
    rule as one binary per job; its answer is decoded into a placement, which the caller
    scores with the evaluator like any other.
    """
    cols = pool + _empty_columns(pb)
    jobs = sorted(pb.devil_cores)
    nc, ng, nt = len(cols), len(pb.groups), len(pb.rack_types)
    links = [(k, j) for k, col in enumerate(cols) for j in _contended_jobs(pb, col)]
    nv = nc + len(jobs)
    a = lil_matrix((ng + nt + len(links), nv))
    for k, col in enumerate(cols):
        for gi, n in enumerate(col.counts):
            if n:
                a[gi, k] = n
        a[ng + col.rack_type, k] = 1
    jpos = {j: nc + i for i, j in enumerate(jobs)}
    for row, (k, j) in enumerate(links, start=ng + nt):
        # a configuration that contends job j may be used only if j lags
        a[row, k] = 1
        a[row, jpos[j]] = -pb.rack_counts[cols[k].rack_type]
    sizes = [g.size for g in pb.groups]
    lo = np.concatenate([sizes, pb.rack_counts, np.full(len(links), -np.inf)])
    # Covering a group more than once is allowed: the spare slots stay empty.
    hi = np.concatenate([np.full(ng, np.inf), pb.rack_counts, np.zeros(len(links))])
    cost = np.concatenate([[col.cost for col in cols], [pb.k_d * pb.devil_cores[j] for j in jobs]])
    upper = np.concatenate([[pb.rack_counts[col.rack_type] for col in cols], np.ones(len(jobs))])
    res = milp(
        cost,
        constraints=LinearConstraint(a.tocsr(), lo, hi),
        integrality=np.ones(nv),
        bounds=VarBounds(np.zeros(nv), upper),
        options={"time_limit": max(0.1, time_limit), "disp": False},
    )
    if res.x is None:
        return None
    return _decode(pb, inst, cols, [round(v) for v in res.x[:nc]])


def rack_uses(pb: RackProblem, assignment: Assignment) -> list[Counter[tuple[int, int]]]:
    """A placement as, per rack, (class, pattern) -> hosts running that pattern
    (the inverse of ``decode``)."""
    group_of = {m: gi for gi, g in enumerate(pb.groups) for m in g.members}
    on_host: dict[int, list[int]] = defaultdict(lambda: [0] * len(pb.groups))
    for c, h in enumerate(assignment):
        on_host[h][group_of[c]] += 1
    index = [{p.counts: pi for pi, p in enumerate(pats)} for pats in pb.patterns]
    out = []
    for hosts in pb.rack_hosts:
        used: Counter[tuple[int, int]] = Counter()
        for ci, members in hosts.items():
            for h in members:
                used[ci, index[ci][tuple(on_host[h])]] += 1
        out.append(used)
    return out


def configuration(
    pb: RackProblem, uses: Iterable[tuple[int, int, int]]
) -> tuple[tuple[int, ...], float]:
    """Members of each group in a rack running ``uses`` ((class, pattern, hosts)), and
    what that configuration costs in F."""
    counts = [0] * len(pb.groups)
    cost = 0.0
    for ci, pi, n in uses:
        p = pb.patterns[ci][pi]
        cost += n * host_cost(pb, ci, p)
        for gi, k in enumerate(p.counts):
            counts[gi] += n * k
    return tuple(counts), cost + rack_cost(pb, tuple(counts))


def seed_columns(pb: RackProblem, assignment: Assignment) -> list[Column]:
    """The rack configurations a placement uses."""
    type_of = {r: rt for rt, racks in enumerate(pb.racks_of_type) for r in racks}
    out: dict[tuple[int, tuple[tuple[int, int, int], ...]], Column] = {}
    for r, used in enumerate(rack_uses(pb, assignment)):
        uses = tuple(sorted((ci, pi, n) for (ci, pi), n in used.items()))
        counts, cost = configuration(pb, uses)
        out[type_of[r], uses] = Column(type_of[r], counts, uses, cost)
    return list(out.values())


def _contended_jobs(pb: RackProblem, col: Column) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for ci, pi, _ in col.patterns:
        p = pb.patterns[ci][pi]
        if p.contended:
            out |= p.devil_jobs
    return out


def _decode(
    pb: RackProblem, inst: Instance, cols: list[Column], uses: list[int]
) -> Assignment | None:
    """Rack configurations (columns used ``uses`` times) -> a host per container."""
    per_rack: list[tuple[tuple[int, int, int], ...]] = [() for _ in pb.racks]
    for rt, racks in enumerate(pb.racks_of_type):
        repeated = [
            col for col, k in zip(cols, uses, strict=True) if col.rack_type == rt for _ in range(k)
        ]
        if len(repeated) != len(racks):
            return None
        for col, r in zip(repeated, racks, strict=True):
            per_rack[r] = col.patterns
    return decode(pb, inst, per_rack)


def decode(
    pb: RackProblem, inst: Instance, per_rack: list[tuple[tuple[int, int, int], ...]]
) -> Assignment | None:
    """(class, pattern, hosts) per rack -> a host per container, keeping members where
    they are; None when the patterns do not hold every container."""
    slots: list[list[int]] = [[] for _ in pb.groups]
    for r, uses in enumerate(per_rack):
        free = {ci: list(hosts) for ci, hosts in pb.rack_hosts[r].items()}
        for ci, pi, n in uses:
            for _ in range(n):
                h = free[ci].pop()
                for gi, k in enumerate(pb.patterns[ci][pi].counts):
                    slots[gi].extend([h] * k)
    out = [-1] * len(inst.containers)
    for gi, g in enumerate(pb.groups):
        if len(slots[gi]) < g.size:
            return None
        free_at = Counter(slots[gi][: g.size])
        rest = []
        for m in g.members:
            here = inst.current[m]
            if here is not None and free_at[here] > 0:
                out[m] = here
                free_at[here] -= 1
            else:
                rest.append(m)
        for m, h in zip(rest, free_at.elements(), strict=True):
            out[m] = h
    return tuple(out)


def residual(pb: RackProblem, sizes: list[int], racks_left: list[int]) -> RackProblem:
    """The problem left once some racks are decided: ``sizes`` members of each group still
    to seat on ``racks_left`` racks of each type. Groups keep their indices, so columns
    of ``pb`` and of the residual problem mean the same."""
    groups = [
        dataclasses.replace(g, members=g.members[:n]) for g, n in zip(pb.groups, sizes, strict=True)
    ]
    racks: list[Counter[int]] = []
    racks_of_type: list[list[int]] = []
    for rt, left in enumerate(racks_left):
        kept = pb.racks_of_type[rt][:left]
        racks_of_type.append(list(range(len(racks), len(racks) + len(kept))))
        racks.extend(pb.racks[r] for r in kept)
    return dataclasses.replace(
        pb, groups=groups, rack_counts=list(racks_left), racks=racks, racks_of_type=racks_of_type
    )


def dive(
    pb: RackProblem,
    inst: Instance,
    pool: list[Column],
    lagging: frozenset[int],
    deadline: float,
) -> Assignment | None:
    """A placement by diving on the relaxation (a primal heuristic of branch and price).

    Starting from one branch of the bound (its lagging jobs; every other devil job may
    not contend), solve the relaxation, decide the racks it already uses whole (every
    non-empty configuration at 1 or more, as many times as its whole part; the largest
    one if none is), and solve again for what is left, until the relaxation is integral
    or nothing is left. Empty racks are never decided early: they are the room the rest
    may need. None when time runs out or the relaxation cannot seat everyone.
    """
    calm = frozenset(pb.devil_cores) - lagging
    sizes = [g.size for g in pb.groups]
    left = list(pb.rack_counts)
    chosen: list[Column] = []
    for _step in range(len(pb.racks) + 1):
        if not any(sizes):
            break
        part = residual(pb, sizes, left)
        _, used = _node_bound(part, pool, calm, lagging, deadline)
        if time.monotonic() >= deadline:
            return None
        racks = [(col, v) for col, v in used if any(col.counts)]
        if not racks:
            return None  # the relaxation leaves members unseated
        if all(abs(v - round(v)) < 1e-6 for _, v in racks):
            picks = [(col, round(v)) for col, v in racks]
        else:
            picks = [(col, math.floor(v + 1e-6)) for col, v in racks if v >= 1 - 1e-6]
            picks = picks or [(max(racks, key=lambda cv: cv[1])[0], 1)]
        for col, wanted in picks:
            times = min(wanted, left[col.rack_type])
            chosen.extend([col] * times)
            left[col.rack_type] -= times
            sizes = [max(0, n - times * k) for n, k in zip(sizes, col.counts, strict=True)]
    if any(sizes):
        return None
    cols = chosen + _empty_columns(pb)
    return _decode(pb, inst, cols, [1] * len(chosen) + left)


def rack_bound(
    pb: RackProblem,
    inst: Instance,
    *,
    weights: Weights,
    limits: Bounds,
    incumbent: float,
    time_limit: float,
    seed: Assignment | None = None,
) -> BoundResult:
    """A lower bound on F over every placement of ``inst`` (``pb = prepare(...)``), and a
    placement better than ``incumbent`` when the integer schedule finds one.

    Best-first branching on jobs: the open branch with the lowest bound is expanded
    until its relaxation contends no undecided job (its bound is then final, and the
    lowest of all), the incumbent is reached, or time runs out.
    """
    start = time.monotonic()
    deadline = start + 0.85 * time_limit  # the rest for the dives and the integer schedule
    # The incumbent's own racks start the pool: the first master is then feasible and
    # its duals mean something.
    pool: list[Column] = seed_columns(pb, seed) if seed is not None else []
    seq = itertools.count()
    b, used = _node_bound(pb, pool, frozenset(), frozenset(), deadline)
    heap = [_Node(b, next(seq), frozenset(), frozenset(), used)]
    nodes = 1
    final = False
    while heap and time.monotonic() < deadline:
        node = heap[0]
        if node.bound >= incumbent:
            break  # no branch can beat the incumbent
        weight = _contending_jobs(pb, node.used)
        undecided = [j for j in weight if j not in node.lagging | node.calm]
        if not undecided:
            final = True  # branching on any job keeps this relaxation's value
            break
        heapq.heappop(heap)
        job = max(undecided, key=lambda j: (weight[j], pb.devil_cores[j]))
        for lagging, calm in (
            (node.lagging | {job}, node.calm),
            (node.lagging, node.calm | {job}),
        ):
            b, used = _node_bound(pb, pool, calm, lagging, deadline)
            nodes += 1
            # A branch's placements are the parent's too: its bound is at least the parent's.
            heapq.heappush(heap, _Node(max(b, node.bound), next(seq), lagging, calm, used))
    lowest = heap[0].bound if heap else incumbent
    found, found_f = None, None
    end = start + time_limit
    candidates = []
    branches = sorted(heap)[:DIVES]
    for k, node in enumerate(branches):
        # Each dive gets an equal share of what is left, the integer schedule one too.
        share = (end - time.monotonic()) / (len(branches) - k + 1)
        candidates.append(dive(pb, inst, pool, node.lagging, time.monotonic() + share))
    candidates.append(integer_schedule(pb, inst, pool, end - time.monotonic()))
    for candidate in candidates:
        if candidate is None or violations(inst, candidate):
            continue
        f = score(inst, candidate, weights, limits).F
        if f < incumbent:
            found, found_f, incumbent = candidate, f, f
    bound = min(lowest, incumbent)
    return BoundResult(
        bound=bound,
        proven_optimal=bound >= incumbent - 1e-9 * max(1.0, abs(incumbent)),
        nodes=nodes,
        columns=len(pool),
        seconds=time.monotonic() - start,
        note="final" if final else "",
        assignment=found,
        F=found_f,
    )
