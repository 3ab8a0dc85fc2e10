"""The cluster as a pool of host types: a joint bound on P and D, and a placement rounded
from it (issue 12).

The rack bound (bound.py) lists every pattern a host can run, which stops at a few
thousand per host class: real snapshots (hundreds of jobs, 2-, 4- and 8-core containers)
never get it, and the relaxations of lower.py price P and D nearly apart, so at 1,024
hosts the proven gap stayed near 30%. This bound joins P and D as the thesis's elaborate
bounding does (§5.5.2), for the whole cluster instead of one rack:

* A *pattern* is what one host runs: a count per container group (all containers of one
  size and class, whatever their job: at most six groups, so it settles in a few rounds at
  any size).
  Its watts follow from it (switch-on plus slope per busy core), and so does whether it
  is *calm* (at most one devil container, or devil cores within the host's tolerance).
* Choosing how many hosts of each type run each pattern, every container covered once,
  is the placement problem without racks. The straggler rule is kept in its linear
  relaxation: each size of job j's devils lags by a share y in [0, 1], at most y of them
  sit on contended patterns, and D is the sum of y times their cores. A job lags if any
  part does, so charging its parts apart counts no more than the whole job.
* Column generation solves the linear relaxation. The pricing problem (the best pattern
  of one host type for given duals) is a knapsack over a host's cores, solved exactly by
  dynamic programming over the few container sizes. Every round gives a valid Lagrangian
  bound (Farley), so a budget that runs out still leaves a correct one.

In a repack each host with residents is a type of its own, and its patterns say which
residents stay (M). Containers of a group are alike for P and D, but not for the
straggler rule: a resident devil that stays on a contended host makes its own job lag.
Counted by group alone, the relaxation kept such residents home and let another job
lag in their place (by a share, over calm hosts too), which no placement can do. So
a contended pattern's kept resident devils are also counted against their own job's
share, and on each host a contended pattern keeping any of them bounds that share
from below, the job lagging whole there (on the 1,024-host repacks: bound +0.001 to
+0.008, gap 16.5% to 14.2% on seed 2). And a repack's talking residents that stay keep
their links (Stay): a job's C is the larger of that and its floor plus calm crossing
(bound +0.007 to +0.015 more).

C is bounded apart (lower.traffic_floor), plus the traffic a job must send if it stays
calm (lower.calm_crossing, charged by 1 - y), and M is at least 0, so adding them keeps a
lower bound on F. The talking jobs outside the Stay rows also share the hosts' sizes
(capacity.py): their C together is at least their capacity floor (_with_shared). Down
hosts run nothing; a drained host counts as a host of its residents' cores that may run
anything, which only enlarges the feasible set.

On realistic snapshots the relaxation's shares mostly come out whole (each y is 0 or 1;
where a job's do not, ``dive`` settles it both ways and the cheaper branch is rounded),
and its patterns say how to place: pack the lagging jobs' devils densely on a few large hosts and
give every other devil a calm host filled with turtles. ``round_by_jobs`` lays its patterns
on the hosts as templates and fills them job by job, keeping each job on few hosts and
racks; ``lagging_whole`` gives a second rounding that keeps the lagging talking jobs whole
on contended hosts; the host search then polishes the better. In a repack the master's
columns also say which residents stay: ``round_by_jobs(keep=True)`` seats each host with
residents on its likeliest column and keeps them there (``_kept_patterns``).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np
from ortools.linear_solver import linear_solver_pb2, pywraplp

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Objectives, Weights, is_contended
from clavis.placement import tradeoff
from clavis.placement.capacity import capacity_floor
from clavis.placement.landing import landing_rows
from clavis.placement.lower import _capacities, calm_crossing, power_floor, traffic_floor_by_job

# Cost of an uncovered container in the restricted master: F spans about 1, so no
# container is worth more. The Lagrangian bound stays valid whatever it is.
BIG = 10.0
EPS = 1e-9
ONE_DEVIL_COLUMNS = 4  # calm columns per host type and round built around one devil group
MAX_ROUNDS = 2000  # column generation rounds at most, whatever the time limit
TURTLES = -1  # the rounding's key for a host template's turtle cores

# A knapsack item: (value, cores, copies, group, rank of the resident in its host's
# keep list, or -1 for copies that are not residents).
Item = tuple[float, int, int, int, int]
# Cover pi, straggler lambda, resident mu (per unit) and nu (per host and unit), the
# Stay block's alpha, beta and sigma, and the power floor row's delta (one value).
Duals = tuple[np.ndarray, ...]
Ranked = tuple[tuple[int, ...], ...]  # per group: a host's residents in keep's order
STAY_SHARE = 0.95  # of the C between residents that Stay rows hold
# A job gets a trade row (tradeoff.py: about a second of CP-SAT for a 16-container job)
# only if its Stay rows hold this share of the C they all hold: at 1,024 hosts the small
# jobs' rows raised the bound by 0.0001 in 20 s, at 32 hosts by up to 0.022.
TRADE_MIN_SHARE = 0.01
FIXED_CHARGES = 4  # a host's charged jobs whose subsets pricing tries all; beyond, spread
# The capacity floor gets a row only where it beats the jobs' own floors by this share.
SHARED_GAIN = 1e-6
NEGLIGIBLE = 1e-13  # a master coefficient on F's scale (about 1) below this is 0


@dataclass(frozen=True)
class HostType:
    """Usable hosts alike in everything P and D see; ``hosts`` lists them. A host with
    residents in a repack (M weighted) is a type of its own: ``keep`` holds, per group,
    the weighted bytes each resident of that group saves by staying, largest first, and
    a drained one runs its residents only (``residents_only``)."""

    cores: int
    tolerance: int
    switch_on: float  # idle - empty watts
    slope: float
    hosts: tuple[int, ...]
    keep: tuple[tuple[float, ...], ...] = ()  # per group; () when nothing stays
    residents_only: bool = False
    # Per group, the straggler unit of each resident in ``keep``'s order (-1: none).
    units: tuple[tuple[int, ...], ...] = ()
    # Per group, the residents themselves (container indices) in ``keep``'s order.
    residents: tuple[tuple[int, ...], ...] = ()

    def kept(self, residents: tuple[tuple[int, int], ...]) -> float:
        """Weighted bytes the residents (group, rank in ``keep``) save by staying."""
        return sum(self.keep[gi][r] for gi, r in residents)


@dataclass(frozen=True)
class PoolGroup:
    """Containers of one size and class: interchangeable for P and D, whatever the job."""

    cores: int
    devil: bool
    members: tuple[int, ...]


@dataclass(frozen=True)
class Straggler:
    """A straggler share y in [0, 1]: what lags of a job's devils of one size (``group``,
    ``devils`` of them, at most y of which sit on contended patterns). ``cost``: their
    weighted cores if they lag whole, less their part of the traffic the job is spared
    when it need not stay calm (lower.calm_crossing)."""

    job: int
    group: int
    devils: int
    cost: float
    spared: float = 0.0  # the traffic part taken off ``cost`` (F's scale): C if calm


@dataclass(frozen=True)
class Stay:
    """What a repack's talking jobs send if their residents stay (issue 12; the thesis has
    no M, so no repack).

    A flow between two residents that both stay keeps its link, so a job sends at least
    the traffic between its kept residents. Per job and pair of hosts with its residents
    (a *row*), with K_a = 1 when resident a stays (the columns of its host keeping it):
    the row's bytes/s that stay are at least the sum over its residents of K_a times
    their bytes/s to the other host, less the row's bytes/s (each pair counted from both
    ends, so it is exact when all stay and never above the truth). A job's C is then at
    least its rows' bytes times their links, and at least its floor plus its calm
    crossing if calm, as before: the larger of the two."""

    # All on F's scale (C weighted), which keeps the master's numbers near 1.
    jobs: tuple[int, ...]
    floor: tuple[float, ...]  # per job: its part of the traffic floor
    penalty: tuple[float, ...]  # per job: what it sends if calm beyond that
    upper: tuple[float, ...]  # per job: the most C it can send
    row_job: tuple[int, ...]  # per row: its job (index into jobs)
    row_cost: tuple[float, ...]  # per row: the C of all its pairs at the row's link
    unit_job: tuple[int, ...]  # per straggler unit: its job's index here, or -1
    unit_penalty: tuple[float, ...]  # per straggler unit: its share of the penalty
    # Per host type, group and rank in keep: the resident's (row, C of its pairs there),
    # and (trade row, its weighted memory) if its job has a trade row.
    resident: tuple[tuple[tuple[tuple[tuple[int, float], ...], ...], ...], ...]
    # Trade rows (tradeoff.py), numbered after the rows above: per row its job and the
    # least C + M that job can pay less all its residents' M, c - sum(K_a * M_a) >= it.
    trade: tuple[tuple[int, float], ...] = ()
    # The index in jobs (-1: none) of the talking jobs outside the rows above, together
    # (_with_shared): their floors and crossing as each job's, and a trade row that holds
    # their capacity floor (capacity.py).
    shared: int = -1
    # Mover rows (landing.py), numbered after the trade rows: per variable its job and
    # its most, per row its variable and the saving (its right-hand side is -saving).
    movers: tuple[tuple[int, float], ...] = ()
    mover_rows: tuple[tuple[int, float], ...] = ()
    # Per mover row (one each, always): (row above, coefficient) of the Stay rows whose z
    # it reads (landing.py).
    mover_shared: tuple[tuple[tuple[int, float], ...], ...] = ()

    @property
    def first_mover_row(self) -> int:
        return len(self.row_job) + len(self.trade)

    @property
    def rows(self) -> int:
        """The master's Stay rows: one per kept pair of hosts, trade row and mover row."""
        return self.first_mover_row + len(self.mover_rows)


@dataclass(frozen=True)
class PoolProblem:
    types: tuple[HostType, ...]
    groups: tuple[PoolGroup, ...]
    units: tuple[Straggler, ...]
    restricted: bool  # some usable hosts left out: its value is no lower bound
    k_p: float
    k_d: float
    constant: float  # F's offset, every host's empty watts and the C floor, weighted
    # For terms(): the constant's weighted floors, and each k * lo (offset = -their sum).
    floors: Objectives
    lows: Objectives
    # Per host type: (unit, row) of each straggler unit with resident devils there; a
    # row keeps a contended pattern of that host keeping any of them within y.
    host_rows: tuple[tuple[tuple[int, int], ...], ...] = ()
    stay: Stay | None = None
    k_c: float = 0.0
    # The least weighted watts above every host's empty ones that any placement draws
    # (lower.power_floor): the master's hosts are fractional and may draw less.
    watts_floor: float = 0.0


@dataclass(frozen=True)
class PoolColumn:
    host_type: int
    counts: tuple[int, ...]  # per group
    calm: bool
    cost: float  # weighted watts above empty, less what the residents kept save
    kept: tuple[tuple[int, int], ...] = ()  # residents that stay: (group, rank in keep)


@dataclass(frozen=True)
class PoolAnswer:
    bound: float  # lower bound on F (-inf if no round finished)
    lp: float | None  # last restricted master's value on F's scale
    rounds: int
    columns: tuple[PoolColumn, ...]
    x: tuple[float, ...]  # the last master's value per column
    lagging: frozenset[int]  # jobs whose share y is above one half there
    converged: bool
    y: tuple[float, ...] = ()  # the last master's straggler shares, per unit
    traffic: float = 0.0  # the last master's C of the Stay jobs, weighted
    short: float = 0.0  # the last master's watts short of the power floor, weighted


def prepare(
    inst: Instance,
    weights: Weights,
    limits: Bounds,
    *,
    up_only: bool = False,
    stay: bool = True,
    trade_until: float | None = None,
    capacity: bool = True,
    landing: bool = True,
) -> PoolProblem | None:
    """The pool problem of an instance; None when nothing can run. ``up_only`` leaves
    out drained hosts (they may keep only their residents), for rounding: the problem is
    then no relaxation and its value no bound (``restricted``). ``stay=False`` leaves
    out the Stay rows of a repack (a smaller master that settles sooner); with
    ``trade_until`` (time.monotonic) the Stay jobs also get trade rows, as many as
    tradeoff.job_floor proves by then. ``capacity=False`` (and ``up_only``) leaves out
    the talking jobs' capacity floor (_with_shared), for rounding: where it holds their
    C, calming a job looks free to the master, and a placement rounded from it calms
    too many (one-rack 300 hosts, 10 s: F 0.4713 -> 0.4773). ``landing=False`` leaves
    out the Stay block's mover rows (landing.py)."""
    usable = _capacities(inst)
    restricted = up_only and any(inst.hosts[hi].state != "up" for hi, _ in usable)
    if up_only:
        usable = [(hi, cap) for hi, cap in usable if inst.hosts[hi].state == "up"]
    if not inst.containers or not usable:
        return None
    (k_p, k_d, k_c, k_m), offset = limits.linear(weights)
    members: dict[tuple[int, bool], list[int]] = defaultdict(list)
    for ci, c in enumerate(inst.containers):
        members[(c.cores, c.devil)].append(ci)
    groups = tuple(PoolGroup(n, d, tuple(ms)) for (n, d), ms in sorted(members.items()))
    group_of = {key: gi for gi, key in enumerate(sorted(members))}
    parts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # job: size: count
    for c in inst.containers:
        if c.devil:
            parts[c.job][c.cores] += 1
    # A calm job spreads its devils and pays traffic for it (lower.calm_crossing): charged
    # unless it lags, as the sum of penalty * (1 - y).
    crossing = calm_crossing(inst) if k_c > 0 else {}
    # With residents, a talking job's C is also bounded by what its residents that stay
    # send (Stay): its floor and crossing go to the master as the other side of a max.
    staying = _staying_jobs(inst) if stay and k_c > 0 and k_m > 0 else set()
    # The other talking jobs share the hosts' sizes (capacity.py): where their capacity
    # floor beats the sum of their own floors, they are one more Stay job together.
    by_job = traffic_floor_by_job(inst) if k_c > 0 else {}
    pooled = set(by_job) - staying if capacity and not up_only else set()
    shared = capacity_floor(inst, pooled) if pooled else 0.0
    if shared <= sum(by_job[j] for j in pooled) * (1 + SHARED_GAIN):
        pooled = set()
    units, shares, penalties = [], [], 0.0
    for job in sorted(parts):
        cores = sum(size * n for size, n in parts[job].items())
        penalty = 0.0 if job in staying or job in pooled else k_c * crossing.get(job, 0.0)
        penalties += penalty
        for size, n in sorted(parts[job].items()):
            share = size * n / cores
            cost = share * (k_d * cores - penalty)
            units.append(Straggler(job, group_of[(size, True)], n, cost, share * penalty))
            shares.append(share)
    # M: every resident moves unless its host's pattern keeps it (HostType.keep).
    unit_of = {(u.job, u.group): ui for ui, u in enumerate(units)}
    gains = _resident_gains(inst, group_of, unit_of, k_m) if k_m > 0 else {}
    kinds: dict[tuple[int, int, float, float], list[int]] = defaultdict(list)
    own: list[HostType] = []
    for hi, cap in usable:
        h = inst.hosts[hi]
        kind = (cap, min(h.devil_tolerance, cap), h.idle_w - h.empty_w, h.slope_w)
        if hi in gains:
            keep, of_unit, residents = gains[hi]
            own.append(
                HostType(
                    *kind,
                    (hi,),
                    keep,
                    residents_only=h.state != "up",
                    units=of_unit,
                    residents=residents,
                )
            )
        else:
            kinds[kind].append(hi)
    types = tuple(HostType(c, t, s, r, tuple(hs)) for (c, t, s, r), hs in sorted(kinds.items()))
    types += tuple(own)
    rows: Stay | None = None
    charges = _Charges(units, shares, len(types), by_job, crossing, k_c)
    if staying:
        ranked = {ht.hosts[0]: (t, gains[ht.hosts[0]][2]) for t, ht in enumerate(types) if ht.keep}
        rows = _stay(
            inst, staying, charges, ranked, k_m=k_m, trade_until=trade_until, landing=landing
        )
    if pooled:
        rows = _with_shared(inst, rows, pooled, shared, charges)
    floors = Objectives(
        P=k_p * sum(h.empty_w for h in inst.hosts),
        D=0.0,
        C=k_c * sum(v for job, v in by_job.items() if job not in staying and job not in pooled),
        # Every resident moved is the most M can be; what the patterns keep comes off it.
        M=sum(sum(sum(g) for g in keep) for keep, _, _ in gains.values()),
    )
    constant = offset + sum(floors.as_tuple()) + penalties
    lo = limits.lo
    lows = Objectives(k_p * lo.P, k_d * lo.D, k_c * lo.C, k_m * lo.M)
    # On small clusters a fractional master runs a fraction of a host: 8-host repacks
    # whose P sat 0.036-0.073 of F below what any placement draws (bound_bench.py).
    empty = sum(h.empty_w for h in inst.hosts)
    watts_floor = k_p * max(0.0, max(power_floor(inst), lo.P) - empty) if k_p > 0 else 0.0
    host_rows, row = [], 0
    for ht in types:
        here = sorted({u for of_group in ht.units for u in of_group if u >= 0})
        host_rows.append(tuple((u, row + k) for k, u in enumerate(here)))
        row += len(here)
    return PoolProblem(
        types,
        groups,
        tuple(units),
        restricted,
        k_p,
        k_d,
        constant,
        floors,
        lows,
        tuple(host_rows),
        rows,
        k_c,
        watts_floor,
    )


def _staying_jobs(inst: Instance) -> set[int]:
    """Jobs with traffic between residents of different hosts."""
    cur = inst.current
    jobs = {
        inst.containers[f.a].job
        for f in inst.flows
        if cur[f.a] is not None and cur[f.b] is not None and cur[f.a] != cur[f.b]
    }
    for u in inst.uniform:
        if len({cur[m] for m in u.members if cur[m] is not None}) > 1:
            jobs.add(inst.containers[u.members[0]].job)
    return jobs


@dataclass(frozen=True)
class _Charges:
    """What prepare() has worked out that the Stay rows charge from."""

    units: list[Straggler]
    shares: list[float]  # per unit: its part of its job's devil cores
    types: int  # host types
    by_job: dict[int, float]  # per talking job: its traffic floor (lower.py)
    crossing: dict[int, float]  # per devil job: what it sends if calm (lower.py)
    k_c: float


def _stay(
    inst: Instance,
    staying: set[int],
    charges: _Charges,
    ranked: dict[int, tuple[int, Ranked]],
    *,
    k_m: float = 0.0,
    trade_until: float | None = None,
    landing: bool = True,
) -> Stay:
    """The Stay rows of a repack: ``ranked`` gives per host with residents its type and,
    per group, its residents in keep's order."""
    units, shares, k_c = charges.units, charges.shares, charges.k_c
    by_job, crossing = charges.by_job, charges.crossing
    cur, racks = inst.current, [h.rack for h in inst.hosts]
    jobs = tuple(sorted(staying))
    index = {job: k for k, job in enumerate(jobs)}
    most = max(inst.same_rack_cost, inst.cross_rack_cost)
    rows: dict[tuple[int, int, int], int] = {}
    row_bytes: list[float] = []
    near: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # ci: row: B/s

    def row(job: int, a: int, b: int) -> int:
        key = (job, min(a, b), max(a, b))
        if key not in rows:
            rows[key] = len(row_bytes)
            row_bytes.append(0.0)
        return rows[key]

    for f in inst.flows:
        job = inst.containers[f.a].job
        a, b = cur[f.a], cur[f.b]
        if job in index and a is not None and b is not None and a != b:
            r = row(job, a, b)
            row_bytes[r] += f.bytes_per_s
            near[f.a][r] += f.bytes_per_s
            near[f.b][r] += f.bytes_per_s
    for u in inst.uniform:
        job = inst.containers[u.members[0]].job
        if job not in index:
            continue
        on: dict[int, list[int]] = defaultdict(list)
        for m in u.members:
            if (h := cur[m]) is not None:
                on[h].append(m)
        for a, b in itertools.combinations(sorted(on), 2):
            r = row(job, a, b)
            row_bytes[r] += u.bytes_per_s * len(on[a]) * len(on[b])
            for mine, other in ((on[a], on[b]), (on[b], on[a])):
                for m in mine:
                    near[m][r] += u.bytes_per_s * len(other)
    keys = sorted(rows, key=lambda key: rows[key])
    link = [
        k_c * (inst.same_rack_cost if racks[a] == racks[b] else inst.cross_rack_cost)
        for _job, a, b in keys
    ]
    # The master's time grows with its rows: the heaviest rows that hold STAY_SHARE of
    # the C at stake, the rest left out (fewer rows only relax the bound).
    cost = [c * b for c, b in zip(link, row_bytes, strict=True)]
    order = sorted(range(len(keys)), key=lambda r: -cost[r])
    total, held, new = sum(cost), 0.0, dict[int, int]()
    for r in order:
        if held >= STAY_SHARE * total:
            break
        new[r] = len(new)
        held += cost[r]
    kept_rows = sorted(new, key=lambda r: new[r])
    floor = [k_c * by_job.get(job, 0.0) for job in jobs]
    penalty = [k_c * crossing.get(job, 0.0) for job in jobs]
    trade: list[tuple[int, float]] = []
    trade_row: dict[int, int] = {}  # job index: its trade row, numbered after the others
    if trade_until is not None:
        at_stake: dict[int, float] = defaultdict(float)
        for r in kept_rows:
            at_stake[index[keys[r][0]]] += cost[r]
        moved: dict[int, float] = defaultdict(float)  # per job: all its residents' M
        for ci, hi in enumerate(cur):
            if hi is not None and inst.containers[ci].job in index:
                moved[index[inst.containers[ci].job]] += k_m * inst.containers[ci].memory_bytes
        enough = TRADE_MIN_SHARE * sum(at_stake.values())
        for k in sorted(at_stake, key=lambda k: -at_stake[k]):  # most C at stake first
            if at_stake[k] < enough:
                break
            least = tradeoff.job_floor(inst, jobs[k], k_c, k_m, trade_until)
            if least is not None and least > floor[k] + EPS:
                trade_row[k] = len(new) + len(trade)
                trade.append((k, least - moved[k]))
    shared = {keys[r]: (new[r], link[r]) for r in new if link[r] > 0}
    movers = landing_rows(inst, index if landing else {}, k_c, shared)
    first = len(new) + len(trade)  # the mover rows come after the trade rows
    resident: list[tuple[tuple[tuple[tuple[int, float], ...], ...], ...]] = [()] * charges.types
    for t, per_group in ranked.values():
        resident[t] = tuple(
            tuple(
                tuple((new[r], link[r] * b) for r, b in sorted(near[ci].items()) if r in new)
                + _traded(inst, ci, index, trade_row, k_m)
                + tuple((first + r, c) for r, c in movers.entries.get(ci, ()))
                for ci in cis
            )
            for cis in per_group
        )
    unit_job = tuple(index.get(u.job, -1) for u in units)
    unit_penalty = tuple(
        k_c * crossing.get(u.job, 0.0) * share if u.job in index else 0.0
        for u, share in zip(units, shares, strict=True)
    )
    return Stay(
        jobs,
        tuple(floor),
        tuple(penalty),
        tuple(k_c * most * inst.job_traffic[job] for job in jobs),
        tuple(index[keys[r][0]] for r in kept_rows),
        tuple(cost[r] for r in kept_rows),
        unit_job,
        unit_penalty,
        tuple(resident),
        tuple(trade),
        movers=movers.variables,
        mover_rows=movers.rows,
        mover_shared=movers.shared,
    )


def _with_shared(
    inst: Instance,
    rows: Stay | None,
    pooled: set[int],
    shared: float,
    charges: _Charges,
) -> Stay:
    """The Stay block with one more job: the talking jobs ``pooled`` together, their C
    at least their floors plus their crossing if calm (each job's as before, summed) and
    at least ``shared``, their capacity floor (a trade row without residents)."""
    units, shares, k_c = charges.units, charges.shares, charges.k_c
    by_job, crossing = charges.by_job, charges.crossing
    none = len(units)
    base = rows or Stay((), (), (), (), (), (), (-1,) * none, (0.0,) * none, ((),) * charges.types)
    k = len(base.jobs)
    sent = sum(inst.job_traffic[j] for j in pooled)
    most = max(inst.same_rack_cost, inst.cross_rack_cost)
    mine = [u.job in pooled for u in units]
    return replace(
        base,
        jobs=(*base.jobs, -1),
        floor=(*base.floor, k_c * sum(by_job[j] for j in pooled)),
        penalty=(*base.penalty, k_c * sum(crossing.get(j, 0.0) for j in pooled)),
        upper=(*base.upper, k_c * most * sent),
        unit_job=tuple(k if m else j for m, j in zip(mine, base.unit_job, strict=True)),
        unit_penalty=tuple(
            k_c * crossing.get(u.job, 0.0) * share if m else p
            for u, share, m, p in zip(units, shares, mine, base.unit_penalty, strict=True)
        ),
        trade=(*base.trade, (k, k_c * shared)),
        shared=k,
    )


def _traded(
    inst: Instance, ci: int, index: dict[int, int], trade_row: dict[int, int], k_m: float
) -> tuple[tuple[int, float], ...]:
    """A resident's (trade row, weighted memory) if its job has a trade row."""
    k = index.get(inst.containers[ci].job)
    if k is None or k not in trade_row:
        return ()
    return ((trade_row[k], k_m * inst.containers[ci].memory_bytes),)


def _resident_gains(
    inst: Instance,
    group_of: dict[tuple[int, bool], int],
    unit_of: dict[tuple[int, int], int],
    k_m: float,
) -> dict[int, tuple[tuple[tuple[float, ...], ...], tuple[tuple[int, ...], ...], Ranked]]:
    """Per host with residents: per group, the weighted bytes of its residents of that
    group, largest first, each one's straggler unit (-1 for a turtle), and the
    residents themselves in that order."""
    per: dict[int, list[list[tuple[float, int, int]]]] = {}
    for ci, hi in enumerate(inst.current):
        if hi is None:
            continue
        c = inst.containers[ci]
        lists = per.setdefault(hi, [[] for _ in group_of])
        gi = group_of[(c.cores, c.devil)]
        lists[gi].append((k_m * c.memory_bytes, unit_of.get((c.job, gi), -1), ci))
    out = {}
    for hi, lists in per.items():
        ranked = [sorted(g, key=lambda it: (-it[0], it[2])) for g in lists]
        out[hi] = (
            tuple(tuple(gain for gain, _, _ in g) for g in ranked),
            tuple(tuple(unit for _, unit, _ in g) for g in ranked),
            tuple(tuple(ci for _, _, ci in g) for g in ranked),
        )
    return out


# --- pricing: the best patterns of one host type ---------------------------------------


@functools.cache
def _shifts(room: int, size: int, most: int) -> tuple[np.ndarray, np.ndarray]:
    """Per copy count k (rows) and capacity c (columns): the capacity c - k*size left
    for the smaller sizes (clipped at 0) and whether it is not negative."""
    left = np.arange(room + 1)[None, :] - size * np.arange(most + 1)[:, None]
    return np.maximum(left, 0), left >= 0


@dataclass(frozen=True)
class _Knapsack:
    """Most value within c cores, for every c up to a room, of copies of items that come
    in a few sizes (containers: 2, 4, 8 cores). Per size the copies are taken most
    valuable first, so a dynamic programme over sizes and copy counts is exact."""

    best: np.ndarray  # per capacity
    takes: tuple[np.ndarray, ...]  # per size: copies of it taken at each capacity
    sizes: tuple[int, ...]
    items: tuple[tuple[tuple[float, int, int, int], ...], ...]  # per size: Item less cores

    @classmethod
    def of(cls, items: list[Item], room: int) -> _Knapsack:
        """Only positive values are worth taking."""
        per: dict[int, list[tuple[float, int, int, int]]] = defaultdict(list)
        for value, cores, copies, gi, rank in items:
            if value > EPS and 0 < cores <= room:
                per[cores].append((value, copies, gi, rank))
        sizes = tuple(sorted(per))
        lists = tuple(tuple(sorted(per[s], key=lambda t: -t[0])) for s in sizes)
        best = np.zeros(room + 1)
        takes = []
        for s, ranked in zip(sizes, lists, strict=True):
            most = room // s
            values = np.repeat([it[0] for it in ranked], [min(it[1], most) for it in ranked])
            prefix = np.concatenate(([0.0], np.cumsum(values[:most])))
            # All copy counts k at once: row k holds best[c - k*s] + prefix[k].
            source, valid = _shifts(room, s, len(prefix) - 1)
            table = np.where(valid, best[source] + prefix[:, None], -np.inf)
            take = np.argmax(table, axis=0)  # the fewest copies among equal values
            best = table.max(axis=0)
            takes.append(take)
        return cls(best, tuple(takes), sizes, lists)

    def pick(self, cap: int, counts: list[int], kept: list[tuple[int, int]]) -> None:
        """Adds the copies behind best[cap] to counts (per group), and the residents
        among them to kept."""
        for step in range(len(self.sizes) - 1, -1, -1):
            k = int(self.takes[step][cap])
            cap -= k * self.sizes[step]
            for _value, copies, gi, rank in self.items[step]:
                if k <= 0:
                    break
                n = min(copies, k)
                counts[gi] += n
                if rank >= 0:
                    kept.append((gi, rank))
                k -= n


def _price(pb: PoolProblem, t: int, duals: Duals) -> list[tuple[float, PoolColumn]]:
    """Columns of host type t with their reduced costs: the best contended pattern, the
    best calm one, and the best calm ones around a single devil of a few groups. A
    resident devil kept on a contended pattern is also charged its own job's dual."""
    pi, lam, mu, nu, _alpha, _beta, sigma, delta = duals
    charges = _stay_charges(pb, t, sigma)
    ht = pb.types[t]
    # The power floor row's dual pays back delta of every weighted watt a pattern draws.
    k_p = pb.k_p * (1.0 - float(delta[0]))
    cap, tol = ht.cores, ht.tolerance
    turtles: list[Item] = []
    calm: list[Item] = []
    contended: list[Item] = []
    single: list[Item] = []  # per devil group: its best copy
    for gi, g in enumerate(pb.groups):
        if g.cores > cap:
            continue
        v = float(pi[gi]) - k_p * ht.slope * g.cores
        items = _copies(ht, gi, g.cores, v, len(g.members), charges=charges[gi] if charges else ())
        if not items:
            continue
        if g.devil:
            calm += items
            for value, c, n, _, rank in items:
                unit = ht.units[gi][rank] if rank >= 0 else -1
                charge = float(lam[gi]) + (float(mu[unit]) if unit >= 0 else 0.0)
                contended.append((value - charge, c, n, gi, rank))
            single.append(max(items))
        else:
            turtles += items
    turtle = _Knapsack.of(turtles, cap)
    picks: list[tuple[float, list[int], list[tuple[int, int]], bool]] = []
    # Calm with devils within the tolerance (none at all included).
    within = _Knapsack.of(calm, tol)
    d = max(range(tol + 1), key=lambda d: float(within.best[d] + turtle.best[cap - d]))
    counts, kept = [0] * len(pb.groups), list[tuple[int, int]]()
    within.pick(d, counts, kept)
    turtle.pick(cap - d, counts, kept)
    picks.append((float(within.best[d] + turtle.best[cap - d]), counts, kept, True))
    # Calm with one devil container above the tolerance, for the best few groups.
    ones = sorted(((it[0] + float(turtle.best[cap - it[1]]), it) for it in single), reverse=True)
    for value, (_v, cores, _n, gi, rank) in ones[:ONE_DEVIL_COLUMNS]:
        counts, kept = [0] * len(pb.groups), ([(gi, rank)] if rank >= 0 else [])
        counts[gi] = 1
        turtle.pick(cap - cores, counts, kept)
        picks.append((value, counts, kept, True))
    picks.append(_contended(pb, t, turtles, contended, nu))
    out = []
    for value, counts, kept, is_calm in picks:
        if any(counts):
            col = _column(pb, t, counts, kept, calm=is_calm)
            out.append((k_p * ht.switch_on - value, col))
    return out


def _contended(
    pb: PoolProblem, t: int, turtles: list[Item], devils: list[Item], nu: np.ndarray
) -> tuple[float, list[int], list[tuple[int, int]], bool]:
    """The best contended pattern: anything that fits, devils charged their straggler
    duals, and a job with a resident kept here its host row's dual once. With few such
    jobs every subset of them is tried (the others' residents may not stay); with more,
    each resident pays its share of its job's charge, which prices no pattern above its
    reduced cost and so keeps the Lagrangian bound valid."""
    ht = pb.types[t]
    charged = {u: float(nu[r]) for u, r in pb.host_rows[t] if nu[r] > EPS} if pb.host_rows else {}
    unit_of = ht.units

    def unit(it: Item) -> int:
        return unit_of[it[3]][it[4]] if it[4] >= 0 else -1

    if len(charged) > FIXED_CHARGES:
        residents = Counter(u for it in devils if (u := unit(it)) in charged)
        spread = [
            (it[0] - charged[u] / residents[u], *it[1:]) if (u := unit(it)) in charged else it
            for it in devils
        ]
        chosen = [_Knapsack.of(turtles + spread, ht.cores)]
        fixed = [0.0]
    else:
        chosen, fixed = [], []
        jobs = sorted(charged)
        for k in range(len(jobs) + 1):
            for opened in itertools.combinations(jobs, k):
                keep = [it for it in devils if unit(it) not in charged or unit(it) in opened]
                chosen.append(_Knapsack.of(turtles + keep, ht.cores))
                fixed.append(sum(charged[u] for u in opened))
    at = max(range(len(chosen)), key=lambda i: float(chosen[i].best[ht.cores]) - fixed[i])
    counts, kept = [0] * len(pb.groups), list[tuple[int, int]]()
    chosen[at].pick(ht.cores, counts, kept)
    return float(chosen[at].best[ht.cores]) - fixed[at], counts, kept, False


def _copies(
    ht: HostType, gi: int, cores: int, value: float, members: int, *, charges: tuple[float, ...]
) -> list[Item]:
    """Knapsack items of group gi on host type ht: each resident of the group its own
    copy, worth what it saves by staying on top less what its staying traffic is
    charged (Stay), then the rest of the group (none on a drained host, which runs its
    residents only)."""
    gains = ht.keep[gi] if ht.keep else ()
    out = [
        (value + gain - (charges[rank] if charges else 0.0), cores, 1, gi, rank)
        for rank, gain in enumerate(gains)
    ]
    rest = 0 if ht.residents_only else members - len(gains)
    if rest > 0:
        out.append((value, cores, rest, gi, -1))
    return out


def _column(
    pb: PoolProblem, t: int, counts: list[int], kept: list[tuple[int, int]], *, calm: bool
) -> PoolColumn:
    ht = pb.types[t]
    busy = sum(n * pb.groups[gi].cores for gi, n in enumerate(counts) if n)
    watts = pb.k_p * (ht.switch_on + ht.slope * busy)
    residents = tuple(sorted(kept))
    return PoolColumn(t, tuple(counts), calm, watts - ht.kept(residents), residents)


def _watts(pb: PoolProblem, col: PoolColumn) -> float:
    """The weighted watts above empty a column's host draws (its cost before what its
    kept residents save)."""
    return col.cost + pb.types[col.host_type].kept(col.kept)


def _below_power_floor(pb: PoolProblem, drawn: float) -> bool:
    """Whether a master drawing ``drawn`` weighted watts above empty draws less than any
    placement does (fractional hosts, on small clusters)."""
    return drawn < pb.watts_floor * (1 - 1e-9)


def below_power_floor(pb: PoolProblem, answer: PoolAnswer) -> bool:
    """Whether an answer solved without the power floor row (``solve(power=False)``)
    draws less than any placement does, so that solving with the row may prove more."""
    drawn = sum(x * _watts(pb, col) for col, x in zip(answer.columns, answer.x, strict=True))
    return pb.watts_floor > NEGLIGIBLE and _below_power_floor(pb, drawn)


def _stay_bytes(pb: PoolProblem, col: PoolColumn) -> dict[int, float]:
    """Per Stay row, what the residents the column keeps send there (C, weighted); sums
    that cancel to nearly 0 (a mover row's own and neighbours' terms) are left out, as
    GLOP's warm solves break down on them (the Lagrangian bound prices residents
    apart, so it stays valid)."""
    out: dict[int, float] = defaultdict(float)
    if pb.stay is None or not col.kept or not pb.stay.resident[col.host_type]:
        return out  # no Stay rows here (only the talking jobs together, _with_shared)
    per_group = pb.stay.resident[col.host_type]
    for gi, rank in col.kept:
        for r, b in per_group[gi][rank]:
            out[r] += b
    return {r: b for r, b in out.items() if abs(b) > NEGLIGIBLE}


def _stay_charges(pb: PoolProblem, t: int, sigma: np.ndarray) -> tuple[tuple[float, ...], ...]:
    """Per group and rank of host type t's residents: sigma times its Stay bytes."""
    if pb.stay is None or not pb.stay.resident[t]:
        return ()
    return tuple(
        tuple(sum(float(sigma[r]) * b for r, b in pairs) for pairs in ranks)
        for ranks in pb.stay.resident[t]
    )


def _units_with_residents(pb: PoolProblem) -> list[int]:
    """The straggler units with a resident devil on some host."""
    return sorted({u for ht in pb.types for units in ht.units for u in units if u >= 0})


def _resident_units(pb: PoolProblem, col: PoolColumn) -> Counter[int]:
    """Per straggler unit, its resident devils a contended column keeps (none if calm)."""
    if col.calm or not col.kept:
        return Counter()
    units = pb.types[col.host_type].units
    return Counter(u for gi, rank in col.kept if (u := units[gi][rank]) >= 0)


# --- the restricted master -------------------------------------------------------------


def master_lp() -> pywraplp.Solver:
    """An empty GLOP model for a restricted master that grows by columns and re-solves
    from its last basis (here and in chunks.py)."""
    lp = pywraplp.Solver.CreateSolver("GLOP")
    if lp is None:
        raise RuntimeError("OR-Tools was built without GLOP")
    # Presolve on every warm solve costs more than it saves: two 1,024-host repack
    # masters (seeds 1 and 3) settled in 5.8 and 7.4 s without it, 6.5 and 10.9 s
    # with it, to the same bounds.
    if not lp.SetSolverSpecificParametersAsString("use_preprocessing: false"):
        raise RuntimeError("GLOP refused its parameters")
    return lp


def solve_master(
    lp: pywraplp.Solver, deadline: float
) -> linear_solver_pb2.MPSolutionResponse | None:
    """The master's answer, read in one call (adding a column invalidates it); None if
    GLOP did not finish by the deadline."""
    lp.SetTimeLimit(max(1, int((deadline - time.monotonic()) * 1000)))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    response = linear_solver_pb2.MPSolutionResponse()
    lp.FillSolutionResponseProto(response)
    return response


class _Master:
    """The restricted master LP, kept in one GLOP model that grows by columns and
    re-solves from its last basis: columns, the straggler shares y and an uncovered slack
    per group (cost BIG) under cover rows (=), at most the hosts of each type, and per
    devil group its copies on contended columns within the devils its shares let lag. In
    a repack also: per share, its own resident devils kept on contended columns within
    it, per host and share a contended column keeping any of them at most it, and the
    Stay rows (_stay_rows)."""

    def __init__(self, pb: PoolProblem, fixed: dict[int, float] | None = None) -> None:
        self.pb = pb
        lp = master_lp()
        self.lp = lp
        inf = lp.infinity()
        self.cover = [lp.Constraint(len(g.members), len(g.members)) for g in pb.groups]
        self.count = [lp.Constraint(-inf, len(ht.hosts)) for ht in pb.types]
        self.straggle = {gi: lp.Constraint(-inf, 0.0) for gi, g in enumerate(pb.groups) if g.devil}
        # A resident devil that stays on a contended host makes its own job lag: per
        # unit with residents, those kept on contended columns within its share.
        self.resident = {ui: lp.Constraint(-inf, 0.0) for ui in _units_with_residents(pb)}
        # And one that stays on its contended host makes it lag whole: per host and unit,
        # the host's contended patterns keeping any of them within the unit's share.
        rows = [(t, u) for t, here in enumerate(pb.host_rows) for u, _ in here]
        self.host_row = [lp.Constraint(-inf, 0.0) for _ in rows]
        objective = lp.Objective()
        objective.SetMinimization()
        self.y = []
        for ui, unit in enumerate(pb.units):
            at = (fixed or {}).get(ui)
            y = lp.NumVar(0.0, 1.0, "") if at is None else lp.NumVar(at, at, "")
            objective.SetCoefficient(y, unit.cost)
            self.straggle[unit.group].SetCoefficient(y, -float(unit.devils))
            if ui in self.resident:
                self.resident[ui].SetCoefficient(y, -float(unit.devils))
            self.y.append(y)
        for (_t, ui), row in zip(rows, self.host_row, strict=True):
            row.SetCoefficient(self.y[ui], -1.0)
        for gi in range(len(pb.groups)):
            slack = lp.NumVar(0.0, inf, "")
            objective.SetCoefficient(slack, BIG)
            self.cover[gi].SetCoefficient(slack, 1.0)
        self._stay_rows(pb.stay)
        # The power floor row comes only once a master settles below it (add_power_row):
        # at 1,024 hosts none does, and present from the start it made a master settle
        # in 7.2 s instead of 0.8 s. Its slack is made here, before any column.
        self.power: pywraplp.Constraint | None = None
        self.short = lp.NumVar(0.0, inf, "") if pb.watts_floor > NEGLIGIBLE else None
        if self.short is not None:
            objective.SetCoefficient(self.short, 1.0)
        self.watts: list[float] = []  # per column: its weighted watts above empty
        self.objective = objective
        self.columns: list[PoolColumn] = []
        self.x: list[pywraplp.Variable] = []

    def _stay_rows(self, st: Stay | None) -> None:
        """Per Stay job its C (c, weighted like all of Stay) at least its floor plus its
        crossing if calm, and at least what its rows keep (z); per row, z at least what
        its kept residents send there less what all its pairs send."""
        lp, inf = self.lp, self.lp.infinity()
        objective = lp.Objective()
        self.sent: list[pywraplp.Variable] = []
        self.calm_row: list[pywraplp.Constraint] = []
        self.link_row: list[pywraplp.Constraint] = []
        self.stay_row: list[pywraplp.Constraint] = []
        self.moved: list[pywraplp.Variable] = []
        if st is None:
            return
        for k in range(len(st.jobs)):
            c = lp.NumVar(0.0, st.upper[k], "")
            objective.SetCoefficient(c, 1.0)
            calm = lp.Constraint(st.floor[k] + st.penalty[k], inf)
            calm.SetCoefficient(c, 1.0)
            link = lp.Constraint(0.0, inf)
            link.SetCoefficient(c, 1.0)
            self.sent.append(c)
            self.calm_row.append(calm)
            self.link_row.append(link)
        for ui, k in enumerate(st.unit_job):
            if k >= 0:
                self.calm_row[k].SetCoefficient(self.y[ui], st.unit_penalty[ui])
        z_of_row = []
        for r, k in enumerate(st.row_job):
            z = lp.NumVar(0.0, st.row_cost[r], "")
            self.link_row[k].SetCoefficient(z, -1.0)
            row = lp.Constraint(-st.row_cost[r], inf)
            row.SetCoefficient(z, 1.0)
            self.stay_row.append(row)
            z_of_row.append(z)
        # Trade rows: c less what the job's kept residents save at least its least C + M
        # less all its residents' M (the columns' coefficients come with _stay_bytes).
        for k, least in st.trade:
            row = lp.Constraint(least, inf)
            row.SetCoefficient(self.sent[k], 1.0)
            self.stay_row.append(row)
        # Mover rows (landing.py): v at least what the moved residents send to those that
        # stay, and c at least the rows' z and the v together.
        for k, most in st.movers:
            v = lp.NumVar(0.0, most, "")
            self.link_row[k].SetCoefficient(v, -1.0)
            self.moved.append(v)
        for (var, saving), reads in zip(st.mover_rows, st.mover_shared, strict=True):
            row = lp.Constraint(-saving, inf)
            row.SetCoefficient(self.moved[var], 1.0)
            for r, c in reads:
                row.SetCoefficient(z_of_row[r], c)
            self.stay_row.append(row)

    def add(self, col: PoolColumn) -> None:
        var = self.lp.NumVar(0.0, self.lp.infinity(), "")
        self.objective.SetCoefficient(var, col.cost)
        self.count[col.host_type].SetCoefficient(var, 1.0)
        for gi, n in enumerate(col.counts):
            if n:
                self.cover[gi].SetCoefficient(var, float(n))
                if not col.calm and gi in self.straggle:
                    self.straggle[gi].SetCoefficient(var, float(n))
        units = _resident_units(self.pb, col)
        for ui, n in units.items():
            self.resident[ui].SetCoefficient(var, float(n))
        for ui, r in self.pb.host_rows[col.host_type] if units else ():
            if ui in units:
                self.host_row[r].SetCoefficient(var, 1.0)
        for r, b in _stay_bytes(self.pb, col).items():
            self.stay_row[r].SetCoefficient(var, -b)
        self.watts.append(_watts(self.pb, col))
        if self.power is not None:
            self.power.SetCoefficient(var, self.watts[-1])
        self.columns.append(col)
        self.x.append(var)

    def short_of_power(self, got: _Solved) -> bool:
        """Whether the answer's hosts draw less than any placement does (fractional
        hosts, on small clusters) and the row that forbids it is not there yet."""
        if self.short is None or self.power is not None:
            return False
        return _below_power_floor(self.pb, float(np.dot(got.x, self.watts[: len(got.x)])))

    def add_power_row(self) -> None:
        """The columns' watts at least the floor; watts short of it cost what drawing them
        would (1 on F's scale), so P is at least the floor and the row's dual stays within
        [0, 1]: pricing never pays a pattern for its switch-on watts, and an empty host
        stays the best pattern of none."""
        assert self.short is not None
        self.power = self.lp.Constraint(self.pb.watts_floor, self.lp.infinity())
        self.power.SetCoefficient(self.short, 1.0)
        for var, watts in zip(self.x, self.watts, strict=True):
            self.power.SetCoefficient(var, watts)

    def solve(self, deadline: float) -> _Solved | None:
        """The master's answer (read in one call: adding a column invalidates it); None
        if GLOP did not finish by the deadline."""
        response = solve_master(self.lp, deadline)
        if response is None:
            return None
        values = np.asarray(response.variable_value)
        duals = np.asarray(response.dual_value)
        ng, nt, nj = len(self.pb.groups), len(self.pb.types), len(self.y)
        lam = np.zeros(ng)
        for r, gi in enumerate(self.straggle):
            lam[gi] = max(0.0, -float(duals[ng + nt + r]))
        mu = np.zeros(nj)
        at = ng + nt + len(self.straggle)  # rows: cover, count, straggle, resident
        for r, ui in enumerate(self.resident):
            mu[ui] = max(0.0, -float(duals[at + r]))
        at += len(self.resident)
        nu = np.maximum(0.0, -duals[at : at + len(self.host_row)])
        alpha = _duals_of(duals, self.calm_row)  # >= rows: their duals are >= 0
        beta = _duals_of(duals, self.link_row)
        sigma = _duals_of(duals, self.stay_row)
        delta = _duals_of(duals, [self.power]) if self.power is not None else np.zeros(1)
        delta = np.minimum(delta, 1.0)  # its slack's cost caps it (up to GLOP's tolerance)
        sent = values[nj + ng : nj + ng + len(self.sent)]
        # variables: y, slacks, each Stay job's C, each row's z, each mover v, the power
        # row's slack, then columns
        links = len(self.pb.stay.row_job) if self.pb.stay is not None else 0
        first = nj + ng + len(self.sent) + links + len(self.moved) + (self.short is not None)
        return _Solved(
            self.objective.Value(),
            duals[:ng].copy(),
            lam,
            mu,
            nu,
            duals[ng : ng + nt].copy(),
            values[first:].copy(),
            values[:nj],
            alpha,
            beta,
            sigma,
            float(np.sum(sent)),
            delta,
            float(values[first - 1]) if self.short is not None else 0.0,
        )


def _duals_of(duals: np.ndarray, rows: list[pywraplp.Constraint]) -> np.ndarray:
    return np.maximum(0.0, duals[[row.index() for row in rows]]) if rows else np.zeros(0)


@dataclass(frozen=True)
class _Solved:
    value: float
    pi: np.ndarray  # cover duals
    lam: np.ndarray  # straggler duals, >= 0 per group (0 for turtles)
    mu: np.ndarray  # resident duals, >= 0 per straggler unit (0 without residents)
    nu: np.ndarray  # host row duals, >= 0 per (host type, unit) row
    rho: np.ndarray  # host count duals, <= 0 per type
    x: np.ndarray  # per column
    y: np.ndarray  # per straggler share
    alpha: np.ndarray  # per Stay job: its calm row's dual, >= 0
    beta: np.ndarray  # per Stay job: its link row's dual, >= 0
    sigma: np.ndarray  # per Stay row: its dual, >= 0
    traffic: float  # the Stay jobs' C, weighted
    delta: np.ndarray  # the power floor row's dual, >= 0 (one value; 0 without the row)
    short: float  # weighted watts short of the floor, paid as if drawn

    @property
    def duals(self) -> Duals:
        return (
            self.pi, self.lam, self.mu, self.nu, self.alpha, self.beta, self.sigma, self.delta
        )  # fmt: skip


def _lagrangian(
    pb: PoolProblem, duals: Duals, best_rc: list[float], fixed: dict[int, float] | None = None
) -> float:
    """A lower bound valid for any duals pi and lambda, mu >= 0 (cover, straggler and
    resident rows relaxed; the host counts per type and y in [0, 1] kept, or y as
    ``fixed``), given each type's least reduced cost of a pattern without its count
    dual."""
    pi, lam, mu, nu, alpha, beta, sigma, delta = duals
    if np.any(pi > BIG + EPS):  # an uncovered container would pay off: no bound
        return -math.inf
    value = float(np.dot(pi, [len(g.members) for g in pb.groups]))
    value += float(delta[0]) * pb.watts_floor
    value += sum(len(ht.hosts) * min(0.0, rc) for ht, rc in zip(pb.types, best_rc, strict=True))
    rows = np.zeros(len(pb.units))
    for here in pb.host_rows:
        for ui, r in here:
            rows[ui] += nu[r]
    st = pb.stay
    for ui, unit in enumerate(pb.units):
        charge = (float(lam[unit.group]) + float(mu[ui])) * unit.devils + float(rows[ui])
        if st is not None and st.unit_job[ui] >= 0:
            charge += float(alpha[st.unit_job[ui]]) * st.unit_penalty[ui]
        at = (fixed or {}).get(ui)
        value += min(0.0, unit.cost - charge) if at is None else (unit.cost - charge) * at
    if st is not None:
        traded = np.zeros(len(st.jobs))
        for i, (k, least) in enumerate(st.trade):
            t_i = float(sigma[len(st.row_job) + i])
            traded[k] += t_i
            value += t_i * least
        for k in range(len(st.jobs)):
            a, b = float(alpha[k]), float(beta[k])
            value += a * (st.floor[k] + st.penalty[k])
            value += min(0.0, 1.0 - a - b - float(traded[k])) * st.upper[k]
        on_var, on_z = np.zeros(len(st.movers)), np.zeros(len(st.row_job))
        for i, ((var, saving), reads) in enumerate(
            zip(st.mover_rows, st.mover_shared, strict=True)
        ):
            s_i = float(sigma[st.first_mover_row + i])
            on_var[var] += s_i
            value -= s_i * saving
            for r, c in reads:
                on_z[r] += s_i * c
        for r, k in enumerate(st.row_job):
            s_r, w = float(sigma[r]), st.row_cost[r]
            value += -s_r * w + min(0.0, float(beta[k]) - s_r - float(on_z[r])) * w
        for var, (k, most) in enumerate(st.movers):
            value += min(0.0, float(beta[k]) - float(on_var[var])) * most
    return value


SMOOTHING = 0.6  # weight of the best bound's duals in the pricing point (Wentges)
# Partial pricing: with many host types (a repack's one-host types, one per pinned
# host), a round prices a rotating share of them; pricing is 80-90% of a round. Eighths
# converged sooner than quarters on three of four 1,024-host repacks (pool alone, sum of
# four: 9.6 s against 12.5 s, the same bounds).
PARTIAL_TYPES = 64  # from this many host types up
PARTS = 8  # a round prices one part of them
FULL_EVERY = 8  # and every so many rounds all of them, which gives the bound


def _between(center: Duals, out: Duals) -> Duals:
    a = SMOOTHING
    return tuple(a * c + (1 - a) * o for c, o in zip(center, out, strict=True))


def _enters(pb: PoolProblem, col: PoolColumn, last: _Solved | None) -> bool:
    """Whether the column has a negative reduced cost at the master's own duals."""
    if last is None:
        return True
    counts = np.asarray(col.counts, dtype=float)
    rc = col.cost - float(counts @ last.pi) - float(last.rho[col.host_type])
    if not col.calm:
        rc += float(counts @ last.lam)
        units = _resident_units(pb, col)
        rc += sum(float(last.mu[ui]) * n for ui, n in units.items())
        rc += sum(float(last.nu[r]) for ui, r in pb.host_rows[col.host_type] if ui in units)
    rc += sum(float(last.sigma[r]) * b for r, b in _stay_bytes(pb, col).items())
    rc -= float(last.delta[0]) * _watts(pb, col)
    return rc < -EPS


def _calm(pb: PoolProblem, t: int, counts: list[int]) -> bool:
    devils = sum(n for gi, n in enumerate(counts) if pb.groups[gi].devil)
    cores = sum(n * pb.groups[gi].cores for gi, n in enumerate(counts) if pb.groups[gi].devil)
    return not is_contended(devils, cores, pb.types[t].tolerance)


def _pricing_window(types: int, offset: int, full: bool) -> list[int]:
    """The host types a round prices: all of them, or PARTS-th of them from offset on."""
    if full or types < PARTIAL_TYPES:
        return list(range(types))
    size = math.ceil(types / PARTS)
    return [(offset + i) % types for i in range(size)]


def solve(
    pb: PoolProblem,
    deadline: float,
    start: tuple[PoolColumn, ...] = (),
    fixed: dict[int, float] | None = None,
    *,
    power: bool = True,
) -> PoolAnswer:
    """Column generation until no pattern prices out or the deadline (time.monotonic),
    from the ``start`` columns if any (another answer's of the same instance: the
    patterns are the same, only the rows differ); ``fixed``: straggler shares held at a
    value (per unit), as a branch of the master does (dive); ``power=False`` keeps the
    power floor row out, for rounding: a 32-host repack rounded from a master with it
    started at F 0.384 instead of 0.345."""
    master = _Master(pb, fixed)
    seen: set[tuple[int, tuple[int, ...], bool, tuple[tuple[int, int], ...]]] = set()
    for col in start:
        key = (col.host_type, col.counts, col.calm, col.kept)
        if key not in seen:
            seen.add(key)
            master.add(col)
    best, rounds, converged = -math.inf, 0, False
    last: _Solved | None = None
    center: Duals | None = None  # duals of the best bound so far
    offset, full = 0, False
    while rounds < MAX_ROUNDS and time.monotonic() < deadline:
        rounds += 1
        if master.columns:
            got = master.solve(deadline)
            if got is None:
                break
            last = got
        out: Duals
        if last is None:
            rows = sum(len(here) for here in pb.host_rows)
            jobs = len(pb.stay.jobs) if pb.stay else 0
            stays = pb.stay.rows if pb.stay else 0
            sizes = (len(pb.groups), len(pb.units), rows, jobs, jobs, stays, 1)
            out = (np.full(len(pb.groups), BIG), *(np.zeros(n) for n in sizes))
        else:
            out = last.duals
        # Wentges smoothing: price at a point between the master's duals and those of
        # the best bound so far, which damps the duals' swings; if that finds no column
        # the master's duals would take (a mispricing), price at the master's own.
        tries = [out] if center is None else [_between(center, out), out]
        priced_types = _pricing_window(len(pb.types), offset, full)
        whole = len(priced_types) == len(pb.types)
        added = 0
        for duals in tries:
            best_rc = []
            for t in priced_types:
                priced = _price(pb, t, duals)
                best_rc.append(min((rc for rc, _ in priced), default=0.0))
                for _rc, col in priced:
                    key = (col.host_type, col.counts, col.calm, col.kept)
                    if key not in seen and _enters(pb, col, last):
                        seen.add(key)
                        master.add(col)
                        added += 1
            if whole:
                # the Lagrangian bound needs every type's best reduced cost
                bound = _lagrangian(pb, duals, best_rc, fixed)
                if bound > best:
                    best, center = bound, duals
            if added:
                break
        if whole:
            if added == 0:
                # Settled below what any placement draws: the power floor row joins, and
                # pricing goes on. Checked only here: early masters, short of columns,
                # drew less on 1,024-host repacks, and the row then slowed them.
                if power and last is not None and master.short_of_power(last):
                    master.add_power_row()
                    continue
                converged = True
                break
            full = False
        else:
            offset = (offset + len(priced_types)) % len(pb.types)
            # a part with no column may hide one elsewhere: all types next round
            full = added == 0 or rounds % FULL_EVERY == 0
    if last is None:
        return PoolAnswer(best + pb.constant, None, rounds, (), (), frozenset(), converged)
    lagging = frozenset(u.job for u, y in zip(pb.units, last.y, strict=True) if y > 0.5)
    return PoolAnswer(
        best + pb.constant,
        last.value + pb.constant,
        rounds,
        tuple(master.columns[: len(last.x)]),
        tuple(float(v) for v in last.x),
        lagging,
        converged,
        tuple(float(v) for v in last.y),
        last.traffic,
        last.short,
    )


# Shares within this of 0 or 1 count as whole for dive().
DIVE_WHOLE = 0.05


def dive(pb: PoolProblem, answer: PoolAnswer, deadline: float, *, power: bool = True) -> PoolAnswer:
    """The master with its least settled job settled, for rounding: the job whose
    straggler shares are furthest from whole (weighted by the D at stake) is held calm
    (every share 0) and lagging (every share 1), each branch solved from the answer's
    columns, and the branch with the lower master value is returned, its bound the
    lower of the two (every placement lies in one branch). A share in between is what
    no placement has: on the variety's quiet-1024 cluster a 512-container stencil at
    y = 0.47 was rounded as calm, could not be kept calm, and lagged beside a job the
    master had let lag in its place. The answer itself if every share is whole or a
    branch does not finish in time (or the answer had no round to dive from)."""
    if answer.lp is None:
        return answer
    at_stake: dict[int, float] = defaultdict(float)
    for unit, y in zip(pb.units, answer.y, strict=True):
        if DIVE_WHOLE < y < 1 - DIVE_WHOLE:
            at_stake[unit.job] += min(y, 1 - y) * (unit.cost + unit.spared)
    if not at_stake:
        return answer
    job = max(at_stake, key=lambda j: (at_stake[j], -j))
    units = [ui for ui, unit in enumerate(pb.units) if unit.job == job]
    branches: list[tuple[float, PoolAnswer]] = []
    for value in (0.0, 1.0):
        got = solve(pb, deadline, answer.columns, dict.fromkeys(units, value), power=power)
        if got.lp is None or not math.isfinite(got.bound):
            return answer
        branches.append((got.lp, got))
    best = min(branches, key=lambda lb: lb[0])[1]
    return replace(best, bound=min(b.bound for _, b in branches))


def terms(pb: PoolProblem, answer: PoolAnswer) -> Objectives | None:
    """The last master's value split into F's weighted terms, each k * (raw - lo) as the
    evaluator weighs a placement's (they add up to ``answer.lp``), or None without a
    master answer. At convergence that value is the bound: set beside a placement's
    terms, this shows which objective holds the gap."""
    if answer.lp is None:
        return None
    watts = kept = 0.0
    for col, x in zip(answer.columns, answer.x, strict=True):
        watts += x * _watts(pb, col)
        kept += x * pb.types[col.host_type].kept(col.kept)
    shares = list(zip(pb.units, answer.y, strict=True))
    lagging = sum(y * (u.cost + u.spared) for u, y in shares)
    calm_traffic = sum((1 - y) * u.spared for u, y in shares)
    f, lo = pb.floors, pb.lows
    return Objectives(
        P=f.P + watts + answer.short - lo.P,
        D=lagging - lo.D,
        C=f.C + calm_traffic + answer.traffic - lo.C,
        M=f.M - kept - lo.M,
    )


# --- rounding: host templates from the master, filled job by job -----------------------


@dataclass
class _Host:
    """A host template being filled: a count per group."""

    host_type: int
    counts: list[int]
    free: int  # cores
    devils: int = 0  # devil containers
    devil_cores: int = 0
    dense: bool = False  # opened for lagging devils (_place_rest): no calm room
    kept: tuple[int, ...] = ()  # residents that stay on it (containers)


def _fill(pb: PoolProblem, host: _Host, gi: int, n: int) -> None:
    g = pb.groups[gi]
    host.counts[gi] += n
    host.free -= n * g.cores
    if g.devil:
        host.devils += n
        host.devil_cores += n * g.cores


def _keeps_calm(pb: PoolProblem, host: _Host, gi: int) -> bool:
    """Whether one container of group gi fits and the host stays calm."""
    g = pb.groups[gi]
    if g.cores > host.free:
        return False
    tol = pb.types[host.host_type].tolerance
    return not g.devil or host.devils == 0 or host.devil_cores + g.cores <= tol


def _rate(ht: HostType) -> float:
    return ht.switch_on / ht.cores + ht.slope


def _whole_patterns(
    pb: PoolProblem, answer: PoolAnswer, left: list[int], hosts: list[_Host]
) -> list[_Host]:
    """``hosts`` and more running the master's patterns as many whole times as it uses
    them, on the host types ``hosts`` leaves."""
    spare = [len(ht.hosts) for ht in pb.types]
    for h in hosts:
        spare[h.host_type] -= 1
    for c in sorted(range(len(answer.columns)), key=lambda c: -answer.x[c]):
        col = answer.columns[c]
        copies = min(int(answer.x[c] + 1e-6), spare[col.host_type])
        for gi, n in enumerate(col.counts):
            if n:
                copies = min(copies, left[gi] // n)
        for _ in range(copies):
            host = _Host(col.host_type, [0] * len(pb.groups), pb.types[col.host_type].cores)
            for gi, n in enumerate(col.counts):
                if n:
                    _fill(pb, host, gi, n)
                    left[gi] -= n
            hosts.append(host)
        spare[col.host_type] -= copies
    return hosts


def _kept_patterns(pb: PoolProblem, answer: PoolAnswer, left: list[int]) -> list[_Host]:
    """In a repack, each host with residents as the master mostly runs it: its likeliest
    column, with the residents that column keeps, if the master runs it at least half
    the time (else it is left for _place_rest to open, its residents moved). The kept
    residents are seated first; the columns' other slots then take what is left of their
    groups, likeliest column first (rounded up, the columns may ask for more)."""
    best: dict[int, tuple[float, float, PoolColumn]] = {}  # own type: (sum x, top x, col)
    for col, x in zip(answer.columns, answer.x, strict=True):
        if not pb.types[col.host_type].keep or x <= EPS:
            continue
        total, top, likeliest = best.get(col.host_type, (0.0, 0.0, col))
        best[col.host_type] = (total + x, x, col) if x > top else (total + x, top, likeliest)
    chosen = sorted(
        ((t, top, col) for t, (total, top, col) in best.items() if total >= 0.5),
        key=lambda it: (-it[1], it[0]),
    )
    hosts: list[_Host] = []
    for t, _top, col in chosen:
        ht = pb.types[t]
        host = _Host(
            t, [0] * len(pb.groups), ht.cores, kept=tuple(ht.residents[g][r] for g, r in col.kept)
        )
        for gi, _rank in col.kept:
            _fill(pb, host, gi, 1)
            left[gi] -= 1
        hosts.append(host)
    for host, (_t, _top, col) in zip(hosts, chosen, strict=True):
        for gi, n in enumerate(col.counts):
            more = min(n - host.counts[gi], left[gi])
            if more > 0:
                _fill(pb, host, gi, more)
                left[gi] -= more
    return hosts


def _place_rest(
    pb: PoolProblem, hosts: list[_Host], left: list[int], deadline: float, dense: list[int]
) -> bool:
    """Seats what the whole patterns left, devils first, largest first. ``dense[gi]`` of
    group gi's devils belong to lagging jobs and found no contended slot: they go
    densely, on a contended template with room, else on a new host of the cheapest
    type (it contends), as the master packs them; rounding its contended columns down
    and seating them calm instead made the rounding keep jobs calm that the master lets
    lag, on more hosts (1,024 hosts, seed 1: 46 lagging jobs for its 57, P_n 0.577 for
    its 0.549). Every other container goes on the fullest template it keeps calm, or on
    a new host of the cheapest type per core, or (no host left) on any room, where
    devils then contend. False if something fits nowhere or the deadline passes."""
    spare = [len(ht.hosts) for ht in pb.types]
    for h in hosts:
        spare[h.host_type] -= 1
    cheapest = sorted(
        (t for t, ht in enumerate(pb.types) if not ht.residents_only),
        key=lambda t: _rate(pb.types[t]),
    )
    order = sorted(
        range(len(pb.groups)), key=lambda gi: (not pb.groups[gi].devil, -pb.groups[gi].cores)
    )
    for gi in order:
        size = pb.groups[gi].cores
        for k in range(left[gi]):
            if time.monotonic() >= deadline:
                return False
            t = next((t for t in cheapest if spare[t] and pb.types[t].cores >= size), None)
            if k < dense[gi]:
                packed = [
                    h
                    for h in hosts
                    if h.free >= size
                    and (h.dense or not _calm(pb, h.host_type, h.counts))
                    and not pb.types[h.host_type].residents_only
                ]
                if packed:
                    _fill(pb, min(packed, key=lambda h: h.free), gi, 1)
                    continue
                if t is not None:
                    spare[t] -= 1
                    hosts.append(_Host(t, [0] * len(pb.groups), pb.types[t].cores, dense=True))
                    _fill(pb, hosts[-1], gi, 1)
                    continue
            # A drained host (residents only) takes nobody else.
            open_ = [h for h in hosts if not pb.types[h.host_type].residents_only]
            fits = [h for h in open_ if _keeps_calm(pb, h, gi) and not h.dense]
            if not fits and t is None:
                # round_by_jobs lets more jobs lag to fill the hosts this contends.
                fits = [h for h in open_ if h.free >= size]
            if fits:
                host = min(fits, key=lambda h: h.free)
            elif t is not None:
                spare[t] -= 1
                host = _Host(t, [0] * len(pb.groups), pb.types[t].cores)
                hosts.append(host)
            else:
                return False
            _fill(pb, host, gi, 1)
        left[gi] = 0
    return True


def _dense_rest(
    inst: Instance, pb: PoolProblem, answer: PoolAnswer, hosts: list[_Host]
) -> list[int]:
    """Per group, the devils of the master's lagging jobs beyond the contended slots
    its whole patterns hold (_place_rest seats them densely)."""
    slots = [0] * len(pb.groups)
    for h in hosts:
        if not _calm(pb, h.host_type, h.counts):
            for gi, n in enumerate(h.counts):
                slots[gi] += n if pb.groups[gi].devil else 0
    lagging = [0] * len(pb.groups)
    for gi, g in enumerate(pb.groups):
        if g.devil:
            lagging[gi] = sum(1 for ci in g.members if inst.containers[ci].job in answer.lagging)
    return [max(0, lagging[gi] - slots[gi]) for gi in range(len(pb.groups))]


def _lagging_enough(
    inst: Instance, pb: PoolProblem, answer: PoolAnswer, hosts: list[_Host]
) -> set[int]:
    """Jobs to let lag: the master's, and more (fewest devil cores first) while the
    contended templates hold more devils of a size than lagging jobs have."""
    lagging = set(answer.lagging)
    slots: dict[int, int] = defaultdict(int)  # contended devil slots by cores
    for h in hosts:
        if not _calm(pb, h.host_type, h.counts):
            for gi, n in enumerate(h.counts):
                if n and pb.groups[gi].devil:
                    slots[pb.groups[gi].cores] += n
    devils: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # size: job: n
    job_cores: dict[int, int] = defaultdict(int)
    for c in inst.containers:
        if c.devil:
            devils[c.cores][c.job] += 1
            job_cores[c.job] += c.cores
    for size, need in slots.items():
        have = sum(n for j, n in devils[size].items() if j in lagging)
        for j in sorted(devils[size], key=lambda j: job_cores[j]):
            if have >= need:
                break
            if j not in lagging:
                lagging.add(j)
                have += devils[size][j]
    return lagging


def lagging_whole(inst: Instance, answer: PoolAnswer) -> Instance | None:
    """The instance as a second rounding should see it: the turtles of every talking job
    the master lets lag counted as devils, so the master packs such a job whole on its
    contended hosts (None if there is no such turtle).

    A job around the devil threshold has devils and turtles scattered over its ring or
    grid. Rounded as it is, its devils go dense on contended hosts and its turtles fill
    the room beside other jobs' calm devils, so nearly every pair of its neighbours
    crosses hosts: on the 4,096-host snapshot (seed 1, 60 s) the lagging jobs with
    turtles sent 62% of C's excess over its floor, 4.5 times their share of it. Counted
    as devils, those turtles take room on the contended hosts, and the turtles of calm
    and silent jobs fill the calm hosts instead. D and P move too (the master charges
    those turtles' cores as lagging devil cores), so the caller scores both roundings
    on the real instance and keeps the better (there: F 0.312 -> 0.299 after regrouping
    and exchanges, and 1,024 hosts, seeds 1-4, 0.6-2.0% lower)."""
    talking = {inst.containers[f.a].job for f in inst.flows}
    talking |= {inst.containers[u.members[0]].job for u in inst.uniform}
    whole = talking & answer.lagging
    if not any(c.job in whole and not c.devil for c in inst.containers):
        return None
    return replace(
        inst,
        containers=tuple(
            replace(c, devil=True) if c.job in whole and not c.devil else c for c in inst.containers
        ),
    )


def round_by_jobs(
    inst: Instance, pb: PoolProblem, answer: PoolAnswer, deadline: float, *, keep: bool = False
) -> Assignment | None:
    """A placement from the master: its patterns become host templates (a
    count of slots per container size and class, calm or not), laid on the hosts of
    each type in rack order, and the jobs fill them one at a time, most traffic first,
    each container on a host of its job if a slot fits there, else in the rack of its
    job's last container, else in the rack with most such room: so jobs stay on few
    hosts and racks. A calm job's devils take calm hosts only; contended hosts take the
    devils of lagging jobs (more jobs lag if the templates hold more). With ``keep`` (a
    repack's master, pb.stay), each host with residents first takes the pattern the
    master mostly gives it and keeps the residents that pattern keeps (_kept_patterns)."""
    if not answer.columns:
        return None
    left = [len(g.members) for g in pb.groups]
    hosts = _whole_patterns(pb, answer, left, _kept_patterns(pb, answer, left) if keep else [])
    if not _place_rest(pb, hosts, left, deadline, _dense_rest(inst, pb, answer, hosts)):
        return None
    lagging = _lagging_enough(inst, pb, answer, hosts)
    # free[(gi, calm)][rack] -> hosts with a free slot of group gi, in rack order
    free: dict[tuple[int, bool], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    slots: dict[tuple[int, int], int] = {}
    # room[(gi, calm)][rack]: the slots (turtle cores) of that kind left in the rack
    room: dict[tuple[int, bool], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    calm_of: dict[int, bool] = {}
    fixed: list[tuple[tuple[int, ...], int]] = []  # kept residents and their host
    for t, ht in enumerate(pb.types):
        physical = sorted(
            # A drained host runs a template only to keep its residents (``keep``).
            (hi for hi in ht.hosts if inst.hosts[hi].state == "up" or (keep and ht.residents_only)),
            key=lambda hi: (inst.hosts[hi].rack, hi),
        )
        mine = sorted(
            (h for h in hosts if h.host_type == t),
            key=lambda h: (_calm(pb, t, h.counts), h.counts),
        )
        if len(mine) > len(physical):
            return None
        for host, hi in zip(mine, physical, strict=False):
            calm_of[hi] = _calm(pb, t, host.counts)
            if host.kept:
                fixed.append((host.kept, hi))
            for gi, n in enumerate(host.counts):
                if n:
                    # A template's turtle slots are turtle cores of any size: P and D are
                    # the same whatever turtles fill them, and a job's turtles then fill
                    # whole hosts, not the slots of their size on many.
                    key = TURTLES if not pb.groups[gi].devil else gi
                    if (hi, key) not in slots:
                        free[(key, calm_of[hi])][inst.hosts[hi].rack].append(hi)
                    units = n * pb.groups[gi].cores if key == TURTLES else n
                    slots[(hi, key)] = slots.get((hi, key), 0) + units
                    room[(key, calm_of[hi])][inst.hosts[hi].rack] += units
    group_of = {(g.cores, g.devil): gi for gi, g in enumerate(pb.groups)}
    traffic = inst.job_traffic
    assignment: list[int | None] = [None] * len(inst.containers)

    # Per up host, the cores its template leaves free (all of an unused host's).
    outside = {hi: h.cores for hi, h in enumerate(inst.hosts) if h.state == "up"}
    for (hi, key), n in slots.items():
        if hi in outside:  # a drained host (residents only) has no room outside
            outside[hi] -= n if key == TURTLES else n * pb.groups[key].cores

    def need(gi: int, cores: int) -> int:
        return cores if gi == TURTLES else 1

    def first(hs: list[int], gi: int, cores: int) -> int | None:
        # Drop the hosts with nothing left; the first with room enough for this one.
        while hs and slots[(hs[0], gi)] <= 0:
            hs.pop(0)
        return next((hi for hi in hs if slots[(hi, gi)] >= need(gi, cores)), None)

    def take(gi: int, cores: int, kinds: list[bool], near: list[int]) -> int | None:
        """A host with room of group gi (of turtle cores): of the job, else in the rack
        of its last one, else in the rack with most such room left. (Counting hosts
        instead, a rack of many nearly full hosts drew a large job that then spilled
        over more racks: at 4,096 hosts its rounding sent C_n 0.216 after regrouping,
        0.189 counting room, and the 60 s answer F 0.313 against 0.307.) A devil tries every
        place of its first kind before its second (a lagging job's devil must not use
        up a calm host's room that a calm job needs); a turtle, either kind at each."""
        passes = [[calm] for calm in kinds] if gi != TURTLES else [kinds]
        for kinds_now in passes:
            for calm in kinds_now:
                for hi in near:  # a host of the job, most recent first
                    if calm_of.get(hi) == calm and slots.get((hi, gi), 0) >= need(gi, cores):
                        return hi
            for calm in kinds_now:
                if near:
                    hit = first(free[(gi, calm)].get(inst.hosts[near[0]].rack, []), gi, cores)
                    if hit is not None:
                        return hit
            best: tuple[int, int] | None = None
            for calm in kinds_now:
                for rk, hs in free[(gi, calm)].items():
                    hit = first(hs, gi, cores)
                    if hit is not None and (best is None or room[(gi, calm)][rk] > best[0]):
                        best = (room[(gi, calm)][rk], hit)
                if best is not None:
                    return best[1]
        return None

    near_of: dict[int, list[int]] = defaultdict(list)  # per job: its hosts, latest first
    for kept, hi in fixed:
        for ci in kept:
            c = inst.containers[ci]
            key = group_of[(c.cores, c.devil)] if c.devil else TURTLES
            slots[(hi, key)] -= need(key, c.cores)
            room[(key, calm_of[hi])][inst.hosts[hi].rack] -= need(key, c.cores)
            assignment[ci] = hi
            if hi not in near_of[c.job]:
                near_of[c.job].insert(0, hi)
    members: dict[int, list[int]] = defaultdict(list)
    for ci, c in enumerate(inst.containers):
        if assignment[ci] is None:
            members[c.job].append(ci)
    for job in sorted(members, key=lambda j: (-traffic[j], j)):
        if time.monotonic() >= deadline:
            return None
        near = near_of[job][:8]
        for ci in members[job]:
            c = inst.containers[ci]
            gi = group_of[(c.cores, c.devil)] if c.devil else TURTLES
            if not c.devil:
                kinds = [True, False]
            elif job in lagging:
                kinds = [False, True]
            else:
                kinds = [True]
            # A calm job's devil with no calm slot left takes a contended one: it lags.
            # With ``keep``, a resident the master moved may still stay if its host's
            # template has a slot for it: moving it would cost its bytes for nothing.
            home = inst.current[ci] if keep else None
            at = take(gi, c.cores, kinds, [home, *near] if home is not None else near)
            if at is None:
                at = take(gi, c.cores, [False], near)
            if at is None and not c.devil:
                # Turtle cores left in pieces too small for it: cores no template
                # holds, on a host in use, else on one more host.
                at = _roomiest(inst, outside, c.cores, near)
                if at is not None:
                    outside[at] -= c.cores
            elif at is not None:
                slots[(at, gi)] -= need(gi, c.cores)
                room[(gi, calm_of[at])][inst.hosts[at].rack] -= need(gi, c.cores)
            if at is None:
                return None
            assignment[ci] = at
            if at in near:
                near.remove(at)
            near.insert(0, at)
            del near[8:]
    if any(a is None for a in assignment):
        return None
    return tuple(a for a in assignment if a is not None)


def _roomiest(inst: Instance, outside: dict[int, int], cores: int, near: list[int]) -> int | None:
    """A host with ``cores`` outside its template: one of the job's, else the fullest
    host in use that has them, else an unused up host (None if there is none)."""
    for hi in near:
        if outside.get(hi, 0) >= cores:
            return hi
    fits = [hi for hi, free in outside.items() if free >= cores]
    busy = [hi for hi in fits if outside[hi] < inst.hosts[hi].cores]
    pool = busy or fits
    return min(pool, key=lambda hi: outside[hi]) if pool else None
