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
  distinct flows, and at least Donath and Hoffman's eigenvalue bound (_spectral: what
  rings and stencils must cut); a tree, ring or grid of neighbours at least every pair
  but the most its places can keep (shapes.py, _shape_cut). Bounds on disjoint sets of
  flows add up.

* P and D together: a placement uses some number m of hosts; it draws at least the m
  smallest switch-on watts, and every host on pays its switch-on watts however little it
  runs (a Lagrangian bound over a price per core, _hosts_on); its calm devils sit on
  those m hosts, so at most the m largest calm capacities hold them. The least over m of
  the weighted sum is a bound.

Summed with the normalisation of objectives.py (``Bounds.linear``) this is a valid lower
bound on F. It is mostly naive in the thesis's sense (§5.5.2: objectives relaxed apart),
so it complements, not replaces, the joint rack bound.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from clavis.instance import Instance, UniformTraffic
from clavis.objectives import Bounds, Weights
from clavis.placement import shapes
from clavis.placement.shapes import Shape

EIGEN_MOST = 2048  # containers in one component at most for its eigenvalues
EIGEN_WORK = 4e10  # sum of n^3 over the eigenvalue problems of one instance at most


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


@dataclass(frozen=True)
class _Power:
    """The P relaxation's parts: watts no placement avoids (empty hosts, the fractional
    knapsack), and the switch-on watts of the cheapest hosts, by how many are on."""

    base: float  # every host's empty watts
    knapsack: float  # fractional knapsack of the demand, switch-on included
    per_core: float  # demand x the smallest slope
    switch_on: list[float]  # prefix sums of the usable hosts' switch-on watts, smallest first
    fewest: int  # fewest usable hosts that hold the demand
    on: list[float]  # per m: watts (empty watts excluded) of m hosts on (_hosts_on)

    @classmethod
    def of(cls, inst: Instance, usable: list[tuple[int, int]]) -> _Power:
        demand = sum(c.cores for c in inst.containers)
        base = sum(h.empty_w for h in inst.hosts)
        if demand == 0 or not usable:
            return cls(base, 0.0, 0.0, [0.0], 0, [0.0])

        # Fractional knapsack: the cheapest cores, switch-on spread over a full host.
        def rate(hc: tuple[int, int]) -> float:
            h = inst.hosts[hc[0]]
            return (h.idle_w - h.empty_w) / hc[1] + h.slope_w

        left, lp = float(demand), 0.0
        for hc in sorted(usable, key=rate):
            take = min(left, float(hc[1]))
            lp += take * rate(hc)
            left -= take
            if left <= 0:
                break
        prefix = [0.0]
        for w in sorted(inst.hosts[hi].idle_w - inst.hosts[hi].empty_w for hi, _ in usable):
            prefix.append(prefix[-1] + w)
        caps, fewest, held = sorted((cap for _, cap in usable), reverse=True), 0, 0
        while fewest < len(caps) and held < demand:
            held += caps[fewest]
            fewest += 1
        slope = min(inst.hosts[hi].slope_w for hi, _ in usable)
        smallest = min(c.cores for c in inst.containers)
        on = _hosts_on(inst, usable, demand, smallest)
        return cls(base, lp, demand * slope, prefix, max(1, fewest), on)

    def watts(self, on: int) -> float:
        """Least watts of a placement that uses ``on`` hosts (``on`` >= fewest)."""
        return self.base + max(self.knapsack, self.switch_on[on] + self.per_core, self.on[on])


# Prices per core tried in _hosts_on: each gives a valid bound, more only tighten it.
CORE_PRICES = 96


def _hosts_on(
    inst: Instance, usable: list[tuple[int, int]], demand: int, smallest: int
) -> list[float]:
    """Per m, least watts (above every host's empty watts) of placements that use exactly
    m hosts; -inf (no bound) where no placement can (more hosts than hold a container).

    A used host h draws s_h (switch-on: idle - empty) plus r_h (slope) per busy core, and
    runs between ``smallest`` (one container) and its capacity of cores; all of them
    together run the demand. For any price mu per core, P - mu * demand is the sum over
    used hosts of s_h + (r_h - mu) * busy_h, each at least
    v_h(mu) = s_h + (r_h - mu) * (smallest if r_h >= mu else capacity), so at least the
    m smallest v_h(mu): a Lagrangian bound of the linear relaxation, valid for every mu
    (the best mu is the marginal watts of a core with m hosts on). The knapsack bound
    lets idle hosts cost nothing; this one charges every host on, so a placement that
    spreads over many hosts to calm its devils pays for each (lower_bound, P and D
    together). On a realistic snapshot of 1,024 hosts it raises the joint bound on F
    from 0.158 to 0.178 (issue 12)."""
    out = [0.0] + [-math.inf] * len(usable)
    rows = [(hi, cap) for hi, cap in usable if cap >= smallest]
    if not rows:
        return out
    s = np.array([inst.hosts[hi].idle_w - inst.hosts[hi].empty_w for hi, _ in rows])
    r = np.array([inst.hosts[hi].slope_w for hi, _ in rows])
    cap = np.array([float(c) for _, c in rows])
    # Where the ordering of the v_h changes: at each slope, and the rates at which a host
    # full or holding one container costs as much per core as the price.
    marks = np.unique(np.concatenate([r, r + s / cap, r + s / smallest, [0.0]]))
    if len(marks) > CORE_PRICES:
        marks = np.quantile(marks, np.linspace(0.0, 1.0, CORE_PRICES))
    marks = np.unique(np.concatenate([marks, np.linspace(0.0, marks[-1], CORE_PRICES // 2)]))
    best = np.full(len(rows), -np.inf)
    for mu in marks:
        v = s + (r - mu) * np.where(r >= mu, float(smallest), cap)
        best = np.maximum(best, np.cumsum(np.sort(v)) + mu * demand)
    out[1 : len(rows) + 1] = [float(x) for x in best]
    return out


def power_floor(inst: Instance) -> float:
    """No placement draws fewer watts than this (see the module docstring, P): the least,
    over the number of hosts in use, of the bound with that many on."""
    power = _Power.of(inst, _capacities(inst))
    last = len(power.switch_on) - 1
    return min(power.watts(m) for m in range(min(power.fewest, last), last + 1))


# Above this many devil cores the subset sum's bitset gets large; its relaxation
# min(total, capacity) is used instead (still valid).
SUBSET_SUM_CAP = 1 << 22


@dataclass(frozen=True)
class _Devils:
    """What the D relaxation needs, computed once: per usable host its calm capacity
    (devil cores, devil containers), and per devil job its devil cores and count."""

    total: int
    hosts: list[tuple[int, int]]  # per usable host: calm devil cores, calm devil containers
    reach: int | None  # bit s set: some set of jobs has s devil cores (None: too large)
    count_prefix: list[int]  # jobs by cores per devil, descending: devils so far
    cores_prefix: list[int]  # ... and their devil cores so far
    pair: float  # least devil cores of jobs holding two devil containers

    @classmethod
    def of(cls, inst: Instance, usable: list[tuple[int, int]]) -> _Devils:
        devils = [c for c in inst.containers if c.devil]
        sizes = sorted(c.cores for c in devils)
        prefix = [0]
        for size in sizes:
            prefix.append(prefix[-1] + size)
        largest = sizes[-1] if sizes else 0
        hosts = []
        for hi, cap in usable:
            tol = inst.hosts[hi].devil_tolerance
            # Calm: one devil (the largest that fits), or devils within the tolerance.
            within = bisect.bisect_right(prefix, min(tol, cap)) - 1  # smallest that fit
            hosts.append((min(cap, max(tol, largest)), max(1, within)))
        cores: Counter[int] = Counter()
        count: Counter[int] = Counter()
        for c in devils:
            cores[c.job] += c.cores
            count[c.job] += 1
        total = sum(cores.values())
        reach: int | None = None
        if total <= SUBSET_SUM_CAP:
            reach = 1
            for v in cores.values():
                reach |= reach << v
        count_prefix, cores_prefix = [0], [0]
        for j in sorted(cores, key=lambda j: -cores[j] / count[j]):
            count_prefix.append(count_prefix[-1] + count[j])
            cores_prefix.append(cores_prefix[-1] + cores[j])
        # Devils that are not calm sit on contended hosts, which hold two or more devils:
        # the lagging jobs have two devil containers at least (one such job, or two jobs).
        one = [cores[j] for j in cores if count[j] >= 2]
        two = sorted(cores.values())[:2]
        pair = float(min([*one, sum(two)] if len(two) == 2 else one, default=0))
        return cls(total, hosts, reach, count_prefix, cores_prefix, pair)

    def lagging(self, calm_cores: int, calm_count: int) -> float:
        """Least devil cores of lagging jobs when calm hosts hold at most so many devil
        cores and devil containers."""
        if self.total == 0:
            return 0.0
        if self.reach is None:
            by_cores = min(self.total, calm_cores)
        else:  # the largest subset sum of jobs' devil cores within the capacity
            by_cores = (self.reach & ((1 << (max(0, calm_cores) + 1)) - 1)).bit_length() - 1
        # Fractional knapsack on the count: jobs with most cores per devil first.
        k = bisect.bisect_right(self.count_prefix, calm_count) - 1
        by_count = float(self.cores_prefix[k])
        if k + 1 < len(self.count_prefix):
            room = calm_count - self.count_prefix[k]
            step = self.count_prefix[k + 1] - self.count_prefix[k]
            by_count += room / step * (self.cores_prefix[k + 1] - self.cores_prefix[k])
        forced = self.total - min(float(by_cores), by_count)
        return 0.0 if forced <= 1e-9 else max(forced, self.pair)


@dataclass(frozen=True)
class _CalmRoom:
    """How much calm room m hosts in use can offer, given that every devil sits somewhere.

    A calm (uncontended) host holds at most its calm capacity of devil cores, a contended
    one at most its cores. So if u of the m hosts are calm, all devil cores fit in the u
    largest calm capacities plus the m - u largest capacities, which caps u. Calm jobs
    then fit in the calm capacity of the u largest only. Without this the D relaxation
    let every host in use be calm, as if the devils of lagging jobs took no room: on a
    realistic snapshot of 1,024 hosts (devils 44% of the cores in use) it allowed 305
    calm hosts out of 305 where at most 190 can be."""

    total: int  # devil cores
    cores: list[int]  # prefix sums of calm devil cores per host, largest first
    count: list[int]  # ... of calm devil containers per host, largest first
    caps: list[int]  # ... of host capacities, largest first

    @classmethod
    def of(cls, devils: _Devils, usable: list[tuple[int, int]]) -> _CalmRoom:
        def prefix(values: list[int]) -> list[int]:
            out = [0]
            for v in sorted(values, reverse=True):
                out.append(out[-1] + v)
            return out

        return cls(
            devils.total,
            prefix([c for c, _ in devils.hosts]),
            prefix([n for _, n in devils.hosts]),
            prefix([cap for _, cap in usable]),
        )

    def _fits(self, m: int, u: int) -> int:
        """Devil cores that u calm and m - u contended hosts hold at most."""
        return self.cores[u] + self.caps[m - u]

    def room(self, m: int) -> tuple[int, int] | None:
        """(calm devil cores, calm devil containers) that m hosts in use offer calm jobs
        at most; None when m hosts cannot hold every devil."""
        # _fits(m, u) is concave in u (each step adds a smaller calm capacity and takes
        # off a larger host capacity), so find its peak, then the last u that fits.
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if self._fits(m, mid + 1) >= self._fits(m, mid):
                lo = mid + 1
            else:
                hi = mid
        if self._fits(m, lo) < self.total:
            return None
        hi = m
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._fits(m, mid) >= self.total:
                lo = mid
            else:
                hi = mid - 1
        return self.cores[lo], self.count[lo]


def contention_floor(inst: Instance) -> float:
    """No placement has fewer contended devil cores than this (module docstring, D)."""
    usable = _capacities(inst)
    devils = _Devils.of(inst, usable)
    room = _CalmRoom.of(devils, usable).room(len(usable))
    if room is None:  # no placement holds every devil: nothing to bound
        return 0.0
    return devils.lagging(*room)


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
class Component:
    """Containers joined by explicit flows: their cores, flows and each one's neighbours."""

    cores: int
    weights: list[float]  # every flow inside, lightest first
    nodes: list[tuple[int, float, list[tuple[float, int]]]]  # cores, degree, neighbours
    job: int = -1
    edges: tuple[tuple[int, int, float], ...] = ()  # (i, k, bytes/s), indices into nodes
    spectra: dict[int, float] = field(default_factory=dict, compare=False)  # see _spectral
    work: list[float] = field(default_factory=lambda: [EIGEN_WORK], compare=False)
    pairs: tuple[float, ...] = ()  # bytes/s between each pair of neighbours, lightest first
    shape: Shape | None = None  # what the pairs form, if a tree, a ring or a grid
    members: tuple[int, ...] = ()  # the containers, in the order of ``nodes``


# The components of the last instance asked: traffic_floor and calm_crossing run for
# every bound (the pool's prepare twice), and the spectral part is the costly one.
_LAST: list[tuple[Instance, list[Component]]] = []


def components(inst: Instance) -> list[Component]:
    """The instance's sets of containers joined by explicit flows, cached for the last
    instance asked (the bounds and relayout.py read them)."""
    last = _LAST[0] if _LAST else None  # one read: another thread may replace it
    if last is not None and last[0] is inst:
        return last[1]
    out = _build_components(inst)
    _LAST[:] = [(inst, out)]
    return out


def _build_components(inst: Instance) -> list[Component]:
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
    edges: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for f in inst.flows:
        edges[root(f.a)].append((f.a, f.b, f.bytes_per_s))
    out = []
    work = [EIGEN_WORK]  # one allowance for all of the instance's components
    for r, vs in members.items():
        nodes = []
        for v in vs:
            items = sorted(nbrs[v], key=lambda it: -it[0] / it[1])
            nodes.append((cores[v], sum(w for w, _ in items), items))
        job = inst.containers[vs[0]].job
        at = {v: i for i, v in enumerate(vs)}
        local = tuple((at[a], at[b], w) for a, b, w in edges[r])
        pairs: dict[tuple[int, int], float] = defaultdict(float)
        for a, b, w in local:
            pairs[min(a, b), max(a, b)] += w
        out.append(
            Component(
                sum(cores[v] for v in vs),
                sorted(weights[r]),
                nodes,
                job,
                local,
                {},
                work,
                tuple(sorted(pairs.values())),
                shapes.recognise(len(vs), list(pairs)),
                tuple(vs),
            )
        )
    return out


def _spectral(comp: Component, capacity: int) -> float:
    """Donath and Hoffman's bound (1973) on the flows cut by any split of the component
    into places of ``capacity`` cores: for places of m_1 >= m_2 >= ... containers, the cut
    is at least half of sum m_i * lambda_i, the Laplacian's eigenvalues taken smallest
    first. A place holds at most s = capacity // the smallest container, so the least
    such sum fills the first places with s each. It sees what the per-container count
    cannot: a ring or a 2-D stencil keeps every neighbour of one container on its host,
    but not of all of them (on the realistic 1,024-host snapshots it raises the host-level
    floor by 29% and 6%). Eigenvalues are sought for components of at most EIGEN_MOST containers,
    and for an instance's components together only while their n^3 stays within
    EIGEN_WORK (about 2 s here): past that a component gets 0, which is still a bound,
    and the same instance always gets the same one."""
    n = len(comp.nodes)
    s = capacity // min(c for c, _, _ in comp.nodes)
    if s <= 0 or n <= s or n > EIGEN_MOST or not comp.edges:
        return 0.0
    if s in comp.spectra:
        return comp.spectra[s]
    if comp.work[0] < n**3:
        return 0.0
    comp.work[0] -= n**3
    q = math.ceil(n / s)
    lap = np.zeros((n, n))
    for i, k, w in comp.edges:
        lap[i, k] -= w
        lap[k, i] -= w
        lap[i, i] += w
        lap[k, k] += w
    low = scipy.linalg.eigh(lap, eigvals_only=True, subset_by_index=[0, q - 1])
    low = np.clip(low, 0.0, None)
    sizes = np.full(q, float(s))
    sizes[-1] = n - (q - 1) * s
    # The eigensolver's rounding is far below this margin at any bytes/s measured.
    value = max(0.0, 0.5 * float(sizes @ low) * (1 - 1e-9) - 1e-9 * float(low[-1]) * n)
    comp.spectra[s] = value
    return value


def _shape_cut(comp: Component, most: int) -> float:
    """Least bytes/s cut when a tree, ring or grid goes at most ``most`` containers to a
    place: every pair of neighbours but the most its places keep (shapes.py), the
    lightest first. 0 for any other set."""
    if comp.shape is None or most >= len(comp.nodes):
        return 0.0
    cut = len(comp.pairs) - shapes.most_inside(comp.shape, most)
    return sum(comp.pairs[: max(0, cut)])


def _cut_flows(components: list[Component], capacity: int) -> float:
    """Least weight of explicit flows cut by any split into places of ``capacity`` cores."""
    total = 0.0
    for comp in components:
        if comp.cores <= capacity:
            continue
        # Each container keeps at most the heaviest neighbours that fit beside it.
        lost = [max(0.0, degree - _keep(capacity - c, items)) for c, degree, items in comp.nodes]
        # A connected set over q places cuts at least q - 1 distinct flows.
        q = math.ceil(comp.cores / capacity)
        most = capacity // min(c for c, _, _ in comp.nodes)
        total += max(
            sum(lost) / 2,
            _apart_loss(comp, lost),
            sum(comp.weights[: q - 1]),
            _spectral(comp, capacity),
            _shape_cut(comp, most),
        )
    return total


def _apart_loss(comp: Component, lost: list[float]) -> float:
    """The losses of a set of containers no two of which share a flow, added up. Each
    flow cut is then counted from one end at most, so the sum is cut too, where
    sum(lost) / 2 halves it. A master-worker star loses nearly all at its master and
    nothing at a worker: this counts the master's loss whole (measured: the floor of
    each star in the 1,024-host seed 1 snapshot was half of the best C found for it,
    traffic alone). Without its flow list (edges) no set is known to be apart: 0."""
    if not comp.edges:
        return 0.0
    near: dict[int, list[int]] = defaultdict(list)
    for i, k, _w in comp.edges:
        near[i].append(k)
        near[k].append(i)
    return sum(lost[i] for i in _apart(dict(enumerate(lost)), near, {}))


def _apart(
    loss: dict[int, float], near: dict[int, list[int]], shared: dict[int, list[int]]
) -> list[int]:
    """Containers with a loss, no two of them neighbours (near) or members of one
    all-to-all entry (shared: the entries' ids), picked greedily, heaviest loss first;
    any such set gives a bound."""
    taken: dict[int, None] = {}  # in the order picked
    entries: set[int] = set()  # all-to-all entries with a member taken
    for ci in sorted(loss, key=lambda v: -loss[v]):
        mine = shared.get(ci, [])
        if loss[ci] <= 0 or entries.intersection(mine) or taken.keys() & near.get(ci, []):
            continue
        taken[ci] = None
        entries.update(mine)
    return list(taken)


def _cut_entry(inst: Instance, u: UniformTraffic, capacity: int) -> float:
    """_cut_flows' bound for one all-to-all entry, counted by container size (it has no
    pair list)."""
    sizes = Counter(inst.containers[m].cores for m in u.members)
    if sum(c * k for c, k in sizes.items()) <= capacity:
        return 0.0
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
    return lost / 2


def host_cost(inst: Instance) -> float:
    """What traffic_floor charges per byte/s that crosses hosts (its rack part aside): the
    same-rack cost, or the cross-rack cost where that is cheaper and racks exist."""
    if len({h.rack for h in inst.hosts}) == 1:
        return inst.same_rack_cost
    return min(inst.same_rack_cost, inst.cross_rack_cost)


def calm_crossing(inst: Instance) -> dict[int, float]:
    """Per devil job, the C (bytes/s x link cost) it must send if it is calm, beyond what
    traffic_floor already counts for it (for the pool bound's straggler shares).

    A calm host holds one devil container or devil cores within its tolerance, so a
    calm job has at most t = max(1, largest tolerance // its smallest devil) devils on a
    host. Each container then keeps at most its t heaviest devil neighbours (t - 1 for a
    devil) plus the heaviest turtle neighbours that fit beside it (fractional knapsack);
    the rest of its traffic crosses, and each crossing flow is seen from both ends. A
    job of devils only (_devils_apart) is also split into places of t devils per host
    and t per usable host of a rack, which rings and stencils pay for more; an all-to-all
    entry with devils is split into racks of t devils per usable host and its turtles
    (_calm_all_to_all)."""
    usable = _capacities(inst)
    if not usable or (not inst.flows and not inst.uniform):
        return {}
    cap = max(c for _, c in usable)
    tol = max(inst.hosts[hi].devil_tolerance for hi, _ in usable)
    smallest: dict[int, int] = {}
    for c in inst.containers:
        if c.devil:
            smallest[c.job] = min(smallest.get(c.job, c.cores), c.cores)
    if not smallest:
        return {}
    nbrs = _devil_neighbours(inst, smallest)
    # Per all-to-all entry of a devil job: its devils and its turtles' sizes, counted once.
    entries: dict[int, list[tuple[UniformTraffic, int, Counter[int]]]] = defaultdict(list)
    for u in inst.uniform:
        if inst.containers[u.members[0]].job in smallest:
            devils = sum(1 for m in u.members if inst.containers[m].devil)
            turtle_sizes = Counter(
                inst.containers[m].cores for m in u.members if not inst.containers[m].devil
            )
            for m in u.members:
                entries[m].append((u, devils, turtle_sizes))
    loss: dict[int, float] = {}
    for ci in set(nbrs) | set(entries):
        c = inst.containers[ci]
        slots = max(1, tol // smallest[c.job]) - (1 if c.devil else 0)
        room = cap - c.cores
        devil_w = sorted((w for w, d in nbrs[ci] if inst.containers[d].devil), reverse=True)
        turtles = sorted(
            ((w, inst.containers[d].cores) for w, d in nbrs[ci] if not inst.containers[d].devil),
            key=lambda it: -it[0] / it[1],
        )
        kept = sum(devil_w[:slots]) + _keep(room, turtles)
        degree = sum(w for w, _ in nbrs[ci])
        for u, devils, turtle_sizes in entries[ci]:
            # The other members: one devil or one turtle of its size fewer.
            n_dev = devils - (1 if c.devil else 0)
            fit, left = 0, room
            for size in sorted(turtle_sizes):
                n = turtle_sizes[size] - (0 if c.devil or size != c.cores else 1)
                take = min(n, left // size)  # most turtles fit smallest first
                fit, left = fit + take, left - take * size
                if take < n:
                    break
            kept += u.bytes_per_s * (min(slots, n_dev) + fit)
            degree += u.bytes_per_s * (len(u.members) - 1)
        loss[ci] = max(0.0, degree - kept)
    lost = _job_losses(inst, loss, nbrs, entries)
    for job, value in _class_losses(inst, nbrs, tol, smallest).items():
        lost[job] = max(lost.get(job, 0.0), value)
    credited: dict[int, float] = defaultdict(float)
    for comp in components(inst):
        credited[comp.job] += _cut_flows([comp], cap)
    for u in inst.uniform:
        credited[inst.containers[u.members[0]].job] += _cut_entry(inst, u, cap)
    apart = _devils_apart(inst, usable, tol, smallest)
    for job, rack_part in _calm_all_to_all(inst, usable, tol, smallest).items():
        host_part, before = apart.get(job, (0.0, 0.0))
        apart[job] = (host_part, before + rack_part)
    out = {}
    for job in set(lost) | set(apart):
        host_part, rack_part = apart.get(job, (0.0, 0.0))
        extra = host_cost(inst) * max(0.0, max(lost[job], host_part) - credited[job])
        extra += rack_part
        if extra > 0:
            out[job] = extra
    return out


def _job_losses(
    inst: Instance,
    loss: dict[int, float],
    nbrs: dict[int, list[tuple[float, int]]],
    entries: dict[int, list[tuple[UniformTraffic, int, Counter[int]]]],
) -> dict[int, float]:
    """Per job, the bytes/s its containers' losses force across hosts: half of their sum
    (each crossing flow seen from both ends), or the whole loss of containers no two of
    which talk (_apart_loss's argument: a calm master keeps few of its workers and
    loses the rest whole), whichever is larger."""
    half: dict[int, float] = defaultdict(float)
    for ci, value in loss.items():
        half[inst.containers[ci].job] += value / 2
    near = {ci: [d for _, d in items] for ci, items in nbrs.items()}
    shared = {ci: [id(u) for u, _, _ in items] for ci, items in entries.items()}
    apart: dict[int, float] = defaultdict(float)
    for ci in _apart(loss, near, shared):
        apart[inst.containers[ci].job] += loss[ci]
    return {job: max(value, apart[job]) for job, value in half.items()}


def _devil_neighbours(
    inst: Instance, smallest: dict[int, int]
) -> dict[int, list[tuple[float, int]]]:
    """Per container of a devil job (a key of ``smallest``), its explicit flows as
    (bytes/s, the container at the other end)."""
    nbrs: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for f in inst.flows:
        if inst.containers[f.a].job in smallest:
            nbrs[f.a].append((f.bytes_per_s, f.b))
            nbrs[f.b].append((f.bytes_per_s, f.a))
    return nbrs


def _class_losses(
    inst: Instance, nbrs: dict[int, list[tuple[float, int]]], tol: int, smallest: dict[int, int]
) -> dict[int, float]:
    """Per devil job, the bytes/s of its explicit flows (``nbrs``) that cross hosts if it
    is calm, counted by class: with at most t of its devils on a host, a devil keeps at
    most its t - 1 heaviest devil flows and a turtle its t heaviest (calm_crossing's
    slots). A devil-devil flow lost is seen from both its ends, so a devil's loss counts
    half; a devil-turtle flow from its turtle end only, so a turtle's counts whole. Those
    sets are disjoint, where the per-container losses halve every flow. A stencil of
    8-core devils and turtles on hosts that tolerate four devil cores (1,024 hosts, 30% of
    cores busy): 0.00073 of F by the per-container losses, 0.00228 so."""
    out: dict[int, float] = defaultdict(float)
    for ci, items in nbrs.items():
        c = inst.containers[ci]
        slots = max(1, tol // smallest[c.job]) - (1 if c.devil else 0)
        devil_w = sorted((w for w, d in items if inst.containers[d].devil), reverse=True)
        out[c.job] += sum(devil_w[slots:]) / (2 if c.devil else 1)
    return {job: value for job, value in out.items() if value > 0}


def _racks(inst: Instance, usable: list[tuple[int, int]]) -> tuple[dict[int, int], dict[int, int]]:
    """Per rack, its usable hosts and their cores."""
    hosts: dict[int, int] = defaultdict(int)
    cores: dict[int, int] = defaultdict(int)
    for hi, c in usable:
        hosts[inst.hosts[hi].rack] += 1
        cores[inst.hosts[hi].rack] += c
    return hosts, cores


def _devils_apart(
    inst: Instance, usable: list[tuple[int, int]], tol: int, smallest: dict[int, int]
) -> dict[int, tuple[float, float]]:
    """Per devil job joined by explicit flows alone: the bytes/s it cuts if calm, split
    into places of t devils (a host; for a job of devils only), and the C its rack part
    adds beyond traffic_floor's, split into places of t devils per usable host of the
    largest rack and at most all its turtles beside them (a rack): each the most of the
    q - 1 lightest flows and the eigenvalue bound."""
    uniform_jobs = {inst.containers[u.members[0]].job for u in inst.uniform}
    per_rack, rack_cores = _racks(inst, usable)
    racks = len({h.rack for h in inst.hosts}) > 1
    cr, cx = inst.same_rack_cost, inst.cross_rack_cost
    out: dict[int, tuple[float, float]] = {}
    for comp in components(inst):
        job = comp.job
        if job not in smallest or job in uniform_jobs:
            continue
        turtles = sum(1 for ci in comp.members if not inst.containers[ci].devil)
        least = min(cores for cores, _, _ in comp.nodes)
        t = max(1, tol // smallest[job])
        host_part = 0.0 if turtles else _split_cut(comp, t, smallest[job])
        rack_part = 0.0
        if racks and cx >= cr:
            most = min(t * max(per_rack.values()) + turtles, max(rack_cores.values()) // least)
            rack_calm = _split_cut(comp, most, least)
            rack_part = (cx - cr) * max(
                0.0, rack_calm - _cut_flows([comp], max(rack_cores.values()))
            )
        before = out.get(job, (0.0, 0.0))
        out[job] = (before[0] + host_part, before[1] + rack_part)
    return out


def _calm_all_to_all(
    inst: Instance, usable: list[tuple[int, int]], tol: int, smallest: dict[int, int]
) -> dict[int, float]:
    """Per devil job with an all-to-all entry: the C its rack part adds if calm, beyond
    traffic_floor's. Calm, it has at most t devils on a host, so a rack holds at most t
    per usable host of them (and its cores' worth), and beside them at most all the
    entry's turtles: a cap on the members in each rack. The pairs kept in racks are at
    most those of filling the largest caps first (n (n - 1) / 2 is convex), and every
    other pair crosses racks."""
    hosts, cores = _racks(inst, usable)
    cr, cx = inst.same_rack_cost, inst.cross_rack_cost
    if len({h.rack for h in inst.hosts}) == 1 or cx < cr:
        return {}
    rack_cap = max(cores.values())
    out: dict[int, float] = defaultdict(float)
    for u in inst.uniform:
        job = inst.containers[u.members[0]].job
        devils = sum(1 for m in u.members if inst.containers[m].devil)
        if job not in smallest or devils == 0:
            continue
        t = max(1, tol // smallest[job])
        least = min(inst.containers[m].cores for m in u.members)
        turtles = len(u.members) - devils
        calm = {r: min(t * hosts[r], cores[r] // smallest[job]) for r in hosts}
        if sum(calm.values()) < devils:  # more devils than calm hosts hold: never calm
            continue
        room = sorted((min(cores[r] // least, calm[r] + turtles) for r in hosts), reverse=True)
        left, kept = len(u.members), 0
        for most in room:
            n = min(most, left)
            kept, left = kept + n * (n - 1) // 2, left - n
        if left:
            continue
        crossing = len(u.members) * (len(u.members) - 1) // 2 - kept
        already = _cut_entry(inst, u, rack_cap)
        out[job] += (cx - cr) * max(0.0, crossing * u.bytes_per_s - already)
    return dict(out)


def _split_cut(comp: Component, most: int, size: int) -> float:
    """Least bytes/s cut when the component's containers go at most ``most`` to a place
    (``size``: its smallest container's cores)."""
    n = len(comp.nodes)
    if n <= most:
        return 0.0
    q = math.ceil(n / most)
    return max(sum(comp.weights[: q - 1]), _spectral(comp, most * size), _shape_cut(comp, most))


def traffic_floor(inst: Instance) -> float:
    """No placement sends less slow-link traffic than this (module docstring, C)."""
    return sum(traffic_floor_by_job(inst).values())


def traffic_floor_by_job(inst: Instance) -> dict[int, float]:
    """traffic_floor per job: every part of it is one job's talking set or all-to-all
    entry, so each job's C is at least its own part."""
    per_host = host_cost(inst)
    return {job: per_host * cut + rack for job, (cut, rack) in traffic_floor_parts(inst).items()}


def traffic_floor_parts(inst: Instance) -> dict[int, tuple[float, float]]:
    """traffic_floor_by_job in its two parts, per job: the bytes/s it cuts across hosts
    at least (each costs host_cost), and the C its crossing racks adds to that."""
    if not inst.flows and not inst.uniform:
        return {}
    usable = _capacities(inst)
    if not usable:
        return {}
    host_cap = max(cap for _, cap in usable)
    rack_cap = max(_racks(inst, usable)[1].values())
    cr, cx = inst.same_rack_cost, inst.cross_rack_cost
    racks = len({h.rack for h in inst.hosts}) > 1 and cx >= cr
    cut: dict[int, float] = defaultdict(float)
    rack: dict[int, float] = defaultdict(float)
    for comp in components(inst):
        # A flow across racks also crosses hosts: cost cr, plus cx - cr for leaving the rack.
        cut[comp.job] += _cut_flows([comp], host_cap)
        if racks:
            rack[comp.job] += (cx - cr) * _cut_flows([comp], rack_cap)
    for u in inst.uniform:
        job = inst.containers[u.members[0]].job
        cut[job] += _cut_entry(inst, u, host_cap)
        if racks:
            rack[job] += (cx - cr) * _cut_entry(inst, u, rack_cap)
    return {job: (value, rack[job]) for job, value in cut.items()}


def lower_bound(inst: Instance, weights: Weights, limits: Bounds) -> LowerBound:
    """The relaxation bounds combined into a lower bound on F (same normalisation).

    P and D are also bounded jointly by the number m of hosts in use: m hosts draw at
    least the m smallest switch-on watts, and calm devils sit on used hosts, so at most
    the m largest calm capacities hold them. Every placement uses some m, so the least
    over m of the weighted sum is a lower bound too (more hosts: less contention, more
    power; the thesis's joint "elaborate" bounding, §5.5.2, in its simplest form)."""
    usable = _capacities(inst)
    power, devils = _Power.of(inst, usable), _Devils.of(inst, usable)
    p, d, c = power_floor(inst), contention_floor(inst), traffic_floor(inst)
    (k_p, k_d, k_c, _k_m), offset = limits.linear(weights)
    # M >= 0 = its normalisation's lower end, so it adds nothing.
    f = k_p * max(p, limits.lo.P) + k_d * d + k_c * c + offset
    if inst.containers and usable and k_p > 0 and k_d > 0 and devils.total > 0:
        calm = _CalmRoom.of(devils, usable)
        joint = math.inf
        for m in range(max(1, power.fewest), len(usable) + 1):
            room = calm.room(m)
            if room is None:  # m hosts cannot hold every devil
                continue
            watts = max(power.watts(m), limits.lo.P)
            joint = min(joint, k_p * watts + k_d * devils.lagging(*room))
        if math.isfinite(joint):
            f = max(f, joint + k_c * c + offset)
    return LowerBound(P=p, D=d, C=c, F=max(0.0, f))
