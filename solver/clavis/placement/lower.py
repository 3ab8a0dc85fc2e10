"""Lower bounds on F from cheap relaxations, one per objective (issue 12).

CP-SAT's relaxation of the per-host model proves nothing on large instances (bound 0,
gap 100% at 64 and 256 hosts), and the rack bound (bound.py) does not apply to every
instance. Each objective has a relaxation that needs no search:

* P: the cores must run somewhere. Powering a host costs its switch-on watts (idle
  minus empty) and each busy core its slope, so no placement draws less than the
  fractional knapsack that buys the demand at the cheapest watts per core of a fully
  used host (switch-on / cores + slope), nor less than the fewest hosts that hold the
  demand at their smallest switch-on watts plus every core at the smallest slope.
* D: a host is calm with one devil container or with devil cores within its tolerance
  (objectives.contended_hosts), so all calm hosts together hold at most so many devil
  cores and devil containers. Under the straggler rule a job is calm only if all its
  devils are, so the devil cores of calm jobs fit in that capacity (a subset sum, and a
  fractional knapsack on the container count); every other job lags. If any must lag,
  the lagging jobs hold two devil containers at least (a contended host has two).
* C: a set of talking containers with more cores than the largest host (rack) spans
  several, so some of its traffic crosses hosts (racks). For each container, the part
  holding it has at most the host's cores, so it keeps at most the heaviest neighbours
  that fit (a fractional knapsack); what it cannot keep crosses, and each crossing flow
  is seen from both ends. A connected set split over q places also cuts at least q - 1
  distinct flows. Bounds on disjoint sets of flows add up.

Summed with the normalisation of objectives.py (``Bounds.linear``) this is a valid lower
bound on F; it is naive in the thesis's sense (§5.5.2: the objectives are relaxed
apart), so it complements, not replaces, the joint rack bound.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from clavis.instance import Instance
from clavis.objectives import Bounds, Weights, min_hosts_needed


@dataclass(frozen=True)
class LowerBound:
    """Raw lower bounds on P (watts), D (devil cores), C (bytes/s x cost), and on F."""

    P: float
    D: float
    C: float
    F: float


def _capacities(inst: Instance) -> list[tuple[int, int]]:
    """(host, cores it may hold) for every host that can run something. A drained host
    keeps only its residents, so it holds at most their cores."""
    residents: dict[int, int] = defaultdict(int)
    for ci, where in enumerate(inst.current):
        if where is not None:
            residents[where] += inst.containers[ci].cores
    out = []
    for hi, spec in enumerate(inst.hosts):
        if spec.state == "up":
            out.append((hi, spec.cores))
        elif spec.state == "drain" and residents[hi]:
            out.append((hi, min(spec.cores, residents[hi])))
    return out


def power_floor(inst: Instance) -> float:
    """No placement draws fewer watts than this (see the module docstring, P)."""
    demand = sum(c.cores for c in inst.containers)
    base = sum(h.empty_w for h in inst.hosts)
    usable = _capacities(inst)
    if demand == 0 or not usable:
        return base
    # Fractional knapsack: fill the cheapest cores (switch-on spread over a full host).
    by_rate = sorted(
        usable,
        key=lambda hc: (
            (inst.hosts[hc[0]].idle_w - inst.hosts[hc[0]].empty_w) / hc[1]
            + inst.hosts[hc[0]].slope_w
        ),
    )
    left, lp = float(demand), 0.0
    for hi, cap in by_rate:
        h = inst.hosts[hi]
        take = min(left, float(cap))
        lp += take * ((h.idle_w - h.empty_w) / cap + h.slope_w)
        left -= take
        if left <= 0:
            break
    # Counting: at least min_hosts_needed hosts are on, each at its switch-on watts.
    switch_on = sorted(inst.hosts[hi].idle_w - inst.hosts[hi].empty_w for hi, _ in usable)
    slope = min(inst.hosts[hi].slope_w for hi, _ in usable)
    counted = sum(switch_on[: min_hosts_needed(inst)]) + demand * slope
    return base + max(lp, counted)


def _subset_sum_at_most(values: list[int], cap: int) -> int:
    """Largest sum of a subset of ``values`` not above ``cap`` (bitset dynamic programme)."""
    if cap <= 0:
        return 0
    if sum(values) <= cap:
        return sum(values)
    mask = (1 << (cap + 1)) - 1
    reach = 1
    for v in values:
        reach = (reach | (reach << v)) & mask
    return reach.bit_length() - 1


# Above this capacity the subset sum's bitset gets large; its relaxation min(total, cap)
# is used instead (still valid).
SUBSET_SUM_CAP = 1 << 22


def contention_floor(inst: Instance) -> float:
    """No placement has fewer contended devil cores than this (module docstring, D)."""
    devils = [c for c in inst.containers if c.devil]
    if len(devils) < 2:
        return 0.0
    sizes = sorted(c.cores for c in devils)
    largest = sizes[-1]
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    calm_cores = calm_count = 0
    for hi, cap in _capacities(inst):
        tol = inst.hosts[hi].devil_tolerance
        # Calm: one devil (the largest that fits), or devils whose cores are within tolerance.
        calm_cores += min(cap, max(tol, largest))
        within = bisect.bisect_right(prefix, min(tol, cap)) - 1  # smallest devils that fit
        calm_count += max(1, within)
    jobs_cores: Counter[int] = Counter()
    jobs_count: Counter[int] = Counter()
    for c in devils:
        jobs_cores[c.job] += c.cores
        jobs_count[c.job] += 1
    total = sum(jobs_cores.values())
    values = list(jobs_cores.values())
    if calm_cores < SUBSET_SUM_CAP:
        by_cores = _subset_sum_at_most(values, calm_cores)
    else:
        by_cores = min(total, calm_cores)
    # Fractional knapsack on the container count: jobs with most cores per devil first.
    by_count, room = 0.0, float(calm_count)
    for j in sorted(jobs_cores, key=lambda j: -jobs_cores[j] / jobs_count[j]):
        take = min(1.0, room / jobs_count[j])
        by_count += take * jobs_cores[j]
        room -= take * jobs_count[j]
        if room <= 0:
            break
    forced = total - min(float(by_cores), by_count)
    if forced <= 0:
        return 0.0
    # Devils that are not calm sit on contended hosts, which hold two or more devils: so
    # the lagging jobs have two devil containers at least (one such job, or two jobs).
    one = [jobs_cores[j] for j in jobs_cores if jobs_count[j] >= 2]
    two = sorted(jobs_cores.values())[:2]
    pair = min([*one, sum(two)] if len(two) == 2 else one, default=forced)
    return max(forced, float(pair))


def _keep(room: float, items: list[tuple[float, int]]) -> float:
    """Fractional knapsack: most weight of (weight, cores) items, best weight per core
    first (the caller sorts them so), within ``room`` cores."""
    kept = 0.0
    for w, c in items:
        if room <= 0:
            break
        take = min(1.0, room / c)
        kept += take * w
        room -= take * c
    return kept


@dataclass(frozen=True)
class _Component:
    """Containers joined by explicit flows: their cores, flows and each one's neighbours."""

    cores: int
    weights: list[float]  # every flow inside, lightest first
    nodes: list[tuple[int, float, list[tuple[float, int]]]]  # cores, degree, neighbours


def _components(inst: Instance) -> list[_Component]:
    nbrs: dict[int, list[tuple[float, int]]] = defaultdict(list)
    parent = list(range(len(inst.containers)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    cores = [c.cores for c in inst.containers]
    for f in inst.flows:
        nbrs[f.a].append((f.bytes_per_s, cores[f.b]))
        nbrs[f.b].append((f.bytes_per_s, cores[f.a]))
        parent[root(f.a)] = root(f.b)
    members: dict[int, list[int]] = defaultdict(list)
    for v in nbrs:
        members[root(v)].append(v)
    weights: dict[int, list[float]] = defaultdict(list)
    for f in inst.flows:
        weights[root(f.a)].append(f.bytes_per_s)
    out = []
    for r, vs in members.items():
        nodes = []
        for v in vs:
            items = sorted(nbrs[v], key=lambda it: -it[0] / it[1])
            nodes.append((cores[v], sum(w for w, _ in items), items))
        out.append(_Component(sum(cores[v] for v in vs), sorted(weights[r]), nodes))
    return out


def _cut_flows(components: list[_Component], capacity: int) -> float:
    """Least weight of explicit flows cut by any split into places of ``capacity`` cores."""
    total = 0.0
    for comp in components:
        if comp.cores <= capacity:
            continue
        # Each container keeps at most the heaviest neighbours that fit beside it.
        lost = sum(max(0.0, degree - _keep(capacity - c, items)) for c, degree, items in comp.nodes)
        # A connected set over q places cuts at least q - 1 distinct flows.
        q = math.ceil(comp.cores / capacity)
        total += max(lost / 2, sum(comp.weights[: q - 1]))
    return total


def _cut_uniform(inst: Instance, capacity: int) -> float:
    """The same bound for all-to-all traffic, counted by container size (no pair list)."""
    total = 0.0
    for u in inst.uniform:
        sizes = Counter(inst.containers[m].cores for m in u.members)
        if sum(c * k for c, k in sizes.items()) <= capacity:
            continue
        lost = 0.0
        for c, k in sizes.items():
            # The others of this member: everyone but itself, smallest first.
            others = sorted((s, n - (s == c)) for s, n in sizes.items())
            room, kept = float(capacity - c), 0.0
            for s, n in others:
                take = min(float(n), room / s)
                kept += take
                room -= take * s
                if room <= 0:
                    break
            lost += k * max(0.0, (len(u.members) - 1) - kept) * u.bytes_per_s
        total += lost / 2
    return total


def traffic_floor(inst: Instance) -> float:
    """No placement sends less slow-link traffic than this (module docstring, C)."""
    if not inst.flows and not inst.uniform:
        return 0.0
    usable = _capacities(inst)
    if not usable:
        return 0.0
    host_cap = max(cap for _, cap in usable)
    per_rack: dict[int, int] = defaultdict(int)
    for hi, cap in usable:
        per_rack[inst.hosts[hi].rack] += cap
    rack_cap = max(per_rack.values())
    cr, cx = inst.same_rack_cost, inst.cross_rack_cost
    components = _components(inst)
    across_hosts = _cut_flows(components, host_cap) + _cut_uniform(inst, host_cap)
    if len({h.rack for h in inst.hosts}) == 1:
        return cr * across_hosts
    if cx < cr:
        return cx * across_hosts
    # A flow across racks also crosses hosts: cost cr, plus cx - cr for leaving the rack.
    across_racks = _cut_flows(components, rack_cap) + _cut_uniform(inst, rack_cap)
    return cr * across_hosts + (cx - cr) * across_racks


def lower_bound(inst: Instance, weights: Weights, limits: Bounds) -> LowerBound:
    """The relaxation bounds combined into a lower bound on F (same normalisation)."""
    p, d, c = power_floor(inst), contention_floor(inst), traffic_floor(inst)
    (k_p, k_d, k_c, _k_m), offset = limits.linear(weights)
    # M >= 0 = its normalisation's lower end, so it adds nothing.
    f = k_p * max(p, limits.lo.P) + k_d * d + k_c * c + offset
    return LowerBound(P=p, D=d, C=c, F=max(0.0, f))
