"""A joint bound on P, D and C whose host patterns know jobs (issue 12).

The pool bound (pool.py) pools containers by size and class, whatever their job, so its
patterns say nothing about traffic: C enters it as each job's floor (lower.py), a
constant, and the master packs hosts for P and D as if no job talked. On the realistic
1,024-host snapshots without a current placement C is two thirds of what the pool bound
misses (docs/benchmarks.md). Here a pattern counts containers per job: a host's share of
one job is a *chunk*, and a chunk of k containers keeps at most I_j(k) of the job's
bytes/s on the host (the heaviest pairs that k containers can hold: for a ring or a tree
k - 1 of them, for a grid of neighbours lattice_most(k), for an all-to-all entry all
k(k - 1)/2; in general half the k largest sums of each container's k - 1 heaviest
neighbours). Every flow a job does not keep on one host crosses hosts, so

    C_j >= host_cost * (W_j - sum over hosts of I_j(k_host)) + its floor's rack part,

which ties C to the patterns: a master that fills hosts with small pieces of talking
jobs, to switch hosts off or to keep devils calm, pays for it. The rows of lower.py stay
beside it (C_j at least its floor, plus its calm crossing if it does not lag), and the
straggler rule is kept per job (its devils on contended patterns within y_j of them).

Column generation as in pool.py (Farley's Lagrangian bound after every round, so a
budget that runs out still leaves a valid bound). The pricing problem of a host type is
a multiple-choice knapsack: per job one choice of how many of its containers of each
group go on the host, by dynamic programming over cores, once over calm patterns (the
state tracks the devils: none, one container, or several within the tolerance) and once
over all patterns with every devil charged as contended.

In a repack (M weighted) every usable host with residents is a host type of its own, as
in pool.py: its patterns keep, of each group they count, the residents of that group
whose moving would cost most, as many as the count allows, and what they save comes off
the pattern's cost (M starts as every resident moved). A drained host runs its
residents only. Every host being its own type, pricing costs a DP per host: cpsat runs
it only where groups times types stay small (up to a few hundred hosts).

The solve seeds the master with the patterns of its best placement and takes the larger
of this bound and the pool's.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
from ortools.linear_solver import pywraplp

from clavis.instance import Assignment, Instance
from clavis.objectives import Bounds, Weights, is_contended
from clavis.placement import shapes
from clavis.placement.lower import (
    _capacities,
    calm_crossing,
    components,
    host_cost,
    power_floor,
    traffic_floor_by_job,
    traffic_floor_parts,
)
from clavis.placement.pool import master_lp, solve_master

BIG = 10.0  # an uncovered container's cost (F spans about 1), as in pool.py
NEG = -1e18
EPS = 1e-9
MAX_ROUNDS = 5000
# A job whose choices on one host exceed this (many sizes and classes on a large host)
# is priced group by group and has no chunk row: still exact pricing, a weaker bound.
MOST_CHOICES = 4000
SMOOTHING = 0.7  # weight of the best bound's duals in the duals priced at (Wentges)
# Rounds a master takes to settle, per group, at most as far as measured (1,024-host
# snapshots without a current placement: 121-168 rounds for 108-149 groups).
ROUNDS_PER_GROUP = 1.3


@dataclass(frozen=True)
class ChunkType:
    """Usable hosts alike in everything P and D see (pool.HostType without residents)."""

    cores: int
    tolerance: int
    switch_on: float  # weighted (k_p) watts of switching one on
    slope: float  # weighted watts per busy core
    hosts: int  # how many
    # A host with residents (a repack): per group with residents here, the weighted
    # bytes that keeping its heaviest k of them saves, for k = 0..their count.
    keep: tuple[tuple[int, tuple[float, ...]], ...] = ()
    residents_only: bool = False  # drained: it runs its residents and nothing else


@dataclass(frozen=True)
class ChunkGroup:
    """A job's containers of one size and class (or, ``job`` -1, every silent turtle
    of one size: nothing tells them apart)."""

    job: int
    cores: int
    devil: bool
    count: int


@dataclass(frozen=True)
class ChunkJob:
    """A job's rows, on F's scale (C weighted): ``inside[k]`` the most its k containers on
    one host keep there times host_cost (None: no chunk row), ``whole`` the right-hand
    side of its chunk row, ``floor`` its traffic floor, ``crossing`` its calm crossing."""

    job: int
    groups: tuple[int, ...]
    devils: int
    devil_cost: float  # k_d times its devil cores: D if it lags
    talks: bool
    floor: float
    whole: float
    crossing: float
    inside: np.ndarray | None


@dataclass(frozen=True)
class ChunkProblem:
    types: tuple[ChunkType, ...]
    groups: tuple[ChunkGroup, ...]
    jobs: tuple[ChunkJob, ...]  # the items of pricing: jobs, then silent turtle groups
    constant: float  # F's offset and every host's empty watts, weighted
    type_of: tuple[int, ...]  # per host, its type (-1: it runs nothing)
    # The least weighted watts above every host's empty ones any placement draws
    # (lower.power_floor): a fractional master may run its work on part of a host.
    watts_floor: float = 0.0


@dataclass(frozen=True)
class ChunkColumn:
    host_type: int
    counts: tuple[tuple[int, int], ...]  # (group, count), groups in order
    cost: float  # weighted watts above empty
    contended: bool
    kept: float = 0.0  # weighted bytes its residents save by staying (M)


@dataclass(frozen=True)
class ChunkAnswer:
    bound: float  # -inf if no round finished
    rounds: int
    converged: bool
    columns: int
    # The last master solved: its columns in use and how many hosts run each (for
    # rounding: chunkround.py). Empty if no master was solved.
    primal: tuple[tuple[ChunkColumn, float], ...] = ()


def chunk_inside(inst: Instance, most: int) -> dict[int, np.ndarray]:
    """Per talking job, I[k] for k = 0..most: the most bytes/s inside any k of its
    containers (module docstring), summed over its talking sets and all-to-all entries
    (k of the job's containers hold at most k of each)."""
    out: dict[int, np.ndarray] = {}
    for comp in components(inst):
        n = len(comp.nodes)
        heaviest = np.concatenate([[0.0], np.cumsum(sorted(comp.pairs, reverse=True))])
        tops = [
            np.cumsum(sorted((w for w, _ in items), reverse=True)) for _, _, items in comp.nodes
        ]
        value = np.zeros(most + 1)
        for k in range(2, most + 1):
            # Each of the k keeps at most its k - 1 heaviest neighbours, each pair seen twice.
            own = sorted((float(t[min(k - 1, len(t)) - 1]) for t in tops if len(t)), reverse=True)
            pairs = min(len(comp.pairs), k * (k - 1) // 2)
            if comp.shape is not None:
                pairs = min(pairs, _most_pairs(comp.shape, min(k, n)))
            value[k] = min(0.5 * sum(own[:k]), float(heaviest[pairs]), float(heaviest[-1]))
        out[comp.job] = out[comp.job] + value if comp.job in out else value
    for u in inst.uniform:
        job = inst.containers[u.members[0]].job
        held = np.minimum(np.arange(most + 1), len(u.members)).astype(float)
        pairs_in = u.bytes_per_s * held * (held - 1) / 2
        out[job] = out[job] + pairs_in if job in out else pairs_in
    return out


def _most_pairs(shape: shapes.Shape, k: int) -> int:
    """Most neighbour pairs among k nodes of a recognised shape (shapes.py)."""
    if shape.kind == "ring":
        return shape.size if k >= shape.size else k - 1
    if shape.kind == "tree":
        return k - 1
    return shapes.lattice_most(k, len(shape.sides))


def prepare(
    inst: Instance, weights: Weights, limits: Bounds, *, most_work: int | None = None
) -> ChunkProblem | None:
    """The chunk problem of an instance; None where it does not apply (no traffic
    weighted or none sent, nothing can run) or, with ``most_work``, where its groups
    times host types exceed it."""
    (k_p, k_d, k_c, k_m), offset = limits.linear(weights)
    if k_c <= 0 or not (inst.flows or inst.uniform):
        return None
    usable = _capacities(inst)
    if not inst.containers or not usable:
        return None
    talking = {inst.containers[f.a].job for f in inst.flows}
    talking |= {inst.containers[u.members[0]].job for u in inst.uniform}
    per: dict[tuple[int, int, bool], int] = Counter()
    for c in inst.containers:
        per[_key(c.job, c.cores, c.devil, talking)] += 1
    keys = sorted(per)
    group_of = {key: gi for gi, key in enumerate(keys)}
    saved = _savings(inst, {hi for hi, _ in usable}, group_of, talking, k_m)
    kinds: dict[tuple[int, int, float, float], list[int]] = defaultdict(list)
    own: list[tuple[int, tuple[int, int, float, float]]] = []
    for hi, cap in usable:
        h = inst.hosts[hi]
        kind = (cap, min(h.devil_tolerance, cap), h.idle_w - h.empty_w, h.slope_w)
        if hi in saved:
            own.append((hi, kind))
        else:
            kinds[kind].append(hi)
    if most_work is not None and len(per) * (len(kinds) + len(own)) > most_work:
        return None  # before the floors: they are the costly part
    ordered = sorted(kinds.items())
    types = [
        ChunkType(cap, tol, k_p * on, k_p * slope, len(hs)) for (cap, tol, on, slope), hs in ordered
    ]
    type_of = [-1] * len(inst.hosts)
    for t, (_, hs) in enumerate(ordered):
        for hi in hs:
            type_of[hi] = t
    for hi, (cap, tol, on, slope) in own:
        type_of[hi] = len(types)
        drained = inst.hosts[hi].state != "up"
        types.append(ChunkType(cap, tol, k_p * on, k_p * slope, 1, saved[hi], drained))
    groups = tuple(ChunkGroup(j, size, devil, per[(j, size, devil)]) for j, size, devil in keys)
    floor = traffic_floor_by_job(inst)
    parts = traffic_floor_parts(inst)
    crossing = calm_crossing(inst) if k_d > 0 else {}
    cap = max(t.cores for t in types)
    inside = chunk_inside(inst, cap // min(c.cores for c in inst.containers))
    per_host = host_cost(inst)
    by_job: dict[int, list[int]] = defaultdict(list)
    for gi, g in enumerate(groups):
        by_job[g.job].append(gi)
    jobs = []
    for job, gis in sorted(by_job.items(), key=lambda kv: (kv[0] < 0, kv[0])):
        if job < 0:  # silent turtles: one item per size
            jobs += [ChunkJob(-1, (gi,), 0, 0.0, False, 0.0, 0.0, 0.0, None) for gi in gis]
            continue
        devils = sum(groups[gi].count for gi in gis if groups[gi].devil)
        devil_cores = sum(groups[gi].count * groups[gi].cores for gi in gis if groups[gi].devil)
        talks = job in talking
        rack = parts.get(job, (0.0, 0.0))[1]
        # A job with too many choices on a host is priced group by group (_choices),
        # which cannot credit its chunks: it has no chunk row.
        ways = math.prod(min(groups[gi].count, cap // groups[gi].cores) + 1 for gi in gis)
        chunk = inside.get(job) if talks and ways <= MOST_CHOICES else None
        jobs.append(
            ChunkJob(
                job,
                tuple(gis),
                devils,
                k_d * devil_cores,
                talks,
                k_c * floor.get(job, 0.0),
                k_c * (per_host * inst.job_traffic[job] + rack),
                k_c * crossing.get(job, 0.0) if devils else 0.0,
                None if chunk is None else k_c * per_host * chunk,
            )
        )
    empty = sum(h.empty_w for h in inst.hosts)
    watts_floor = k_p * max(0.0, max(power_floor(inst), limits.lo.P) - empty)
    moved = k_m * sum(  # M if every resident moves: what the patterns keep comes off it
        c.memory_bytes
        for c, cur in zip(inst.containers, inst.current, strict=True)
        if cur is not None
    )
    constant = offset + k_p * empty + moved
    return ChunkProblem(tuple(types), groups, tuple(jobs), constant, tuple(type_of), watts_floor)


def _key(job: int, cores: int, devil: bool, talking: set[int]) -> tuple[int, int, bool]:
    """A container's group: its job's of its size and class, or every silent turtle's of
    its size."""
    return (-1 if job not in talking and not devil else job, cores, devil)


def _savings(
    inst: Instance,
    usable: set[int],
    group_of: dict[tuple[int, int, bool], int],
    talking: set[int],
    k_m: float,
) -> dict[int, tuple[tuple[int, tuple[float, ...]], ...]]:
    """Per usable host with residents (M weighted): per group with residents there, the
    weighted bytes its heaviest k residents save by staying, for k = 0..their count."""
    if k_m <= 0 or not inst.has_current:
        return {}
    per: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for c, cur in zip(inst.containers, inst.current, strict=True):
        if cur is not None and cur in usable:
            per[cur][group_of[_key(c.job, c.cores, c.devil, talking)]].append(k_m * c.memory_bytes)
    return {
        hi: tuple((gi, _heaviest_first(ms)) for gi, ms in sorted(groups.items()))
        for hi, groups in per.items()
    }


def _heaviest_first(values: list[float]) -> tuple[float, ...]:
    """The sums of the k largest values, for k = 0..len(values)."""
    return (0.0, *itertools.accumulate(sorted(values, reverse=True)))


def _kept(saving: tuple[float, ...], n: np.ndarray) -> np.ndarray:
    """What n containers of a group keep on a host whose residents of it save ``saving``
    (ChunkType.keep): its heaviest min(n, residents)."""
    out: np.ndarray = np.asarray(saving)[np.minimum(n, len(saving) - 1)]
    return out


# --- pricing ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Choices:
    """One job's choices on one host type: counts per its groups, cores, devils, devil
    cores and chunk size, as arrays (row 0 is the empty choice)."""

    groups: tuple[int, ...]  # the groups counted, in counts' columns
    counts: np.ndarray  # (choices, groups)
    cores: np.ndarray
    devils: np.ndarray
    devil_cores: np.ndarray
    size: np.ndarray


def _choices(pb: ChunkProblem, item: ChunkJob, cap: int) -> list[_Choices]:
    """The item's choices on a host of ``cap`` cores (several when it is split)."""
    gs = [pb.groups[gi] for gi in item.groups]
    ranges = [range(0, min(g.count, cap // g.cores) + 1) for g in gs]
    if item.inside is None and math.prod(len(r) for r in ranges) > MOST_CHOICES:
        return [_one_group(pb, gi, cap) for gi in item.groups]
    rows = [np.zeros(len(gs), dtype=np.int64)]
    for combo in _combos(ranges, [g.cores for g in gs], cap):
        rows.append(np.asarray(combo, dtype=np.int64))
    counts = np.vstack(rows)
    cores = counts @ np.asarray([g.cores for g in gs])
    is_devil = np.asarray([g.devil for g in gs], dtype=np.int64)
    devils = counts @ is_devil
    devil_cores = counts @ (is_devil * np.asarray([g.cores for g in gs]))
    return [_Choices(item.groups, counts, cores, devils, devil_cores, counts.sum(axis=1))]


def _one_group(pb: ChunkProblem, gi: int, cap: int) -> _Choices:
    g = pb.groups[gi]
    n = np.arange(0, min(g.count, cap // g.cores) + 1, dtype=np.int64)
    devils = n if g.devil else np.zeros_like(n)
    return _Choices((gi,), n[:, None], n * g.cores, devils, devils * g.cores, n)


def _combos(ranges: list[range], sizes: list[int], cap: int) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []

    def walk(i: int, left: int, acc: list[int]) -> None:
        if i == len(ranges):
            if any(acc):
                out.append(tuple(acc))
            return
        for n in ranges[i]:
            if n * sizes[i] > left:
                break
            acc.append(n)
            walk(i + 1, left - n * sizes[i], acc)
            acc.pop()

    walk(0, cap, [])
    return out


@dataclass(frozen=True)
class _Table:
    """One item's choices on a host type, with what the DP needs of each: the gather
    index that shifts a row by its cores, and the calm DP's next state from each state
    (-1: the host would contend)."""

    item: int
    choices: _Choices
    index: np.ndarray  # (choices, cores + 1)
    # The calm DP's moves grouped by the state they reach: per reached state, the
    # states and choices that reach it.
    moves: tuple[tuple[int, np.ndarray, np.ndarray], ...]


@dataclass(frozen=True)
class _States:
    """The calm DP's states on a host type: 0 no devil; 1 + i one devil container of the
    i-th devil size; base + dc - 1 several devil containers of dc devil cores in all."""

    sizes: tuple[int, ...]
    tolerance: int

    @property
    def base(self) -> int:
        return 1 + len(self.sizes)

    @property
    def count(self) -> int:
        return self.base + self.tolerance

    def after(self, z: int, ch: _Choices) -> np.ndarray:
        b, dc = ch.devils, ch.devil_cores
        if z == 0:
            held = np.zeros_like(dc)
        elif z < self.base:
            held = np.full_like(dc, self.sizes[z - 1])
        else:
            held = np.full_like(dc, z - self.base + 1)
        total = held + dc
        out = np.where(total <= self.tolerance, self.base + total - 1, -1)
        if z == 0:
            one = {s: 1 + i for i, s in enumerate(self.sizes)}
            singles = np.asarray([one.get(int(x), -1) for x in dc], dtype=np.int64)
            out = np.where(b == 1, singles, out)
        return np.where(b == 0, z, out)


@dataclass(frozen=True)
class _Pricing:
    """What pricing one host type reads: its kind's tables (alike for every host of its
    cores and tolerance) and, on a host with residents, per table what each choice's
    residents save by staying (None where the table's job has none here; NEG where a
    drained host may not run the choice)."""

    states: _States
    tables: list[_Table]
    saved: list[np.ndarray | None]


def _pricing(
    pb: ChunkProblem, t: int, shared: dict[tuple[int, int], tuple[_States, list[_Table]]]
) -> _Pricing:
    ht = pb.types[t]
    key = (ht.cores, ht.tolerance)
    if key not in shared:
        shared[key] = _tables(pb, t)
    states, tables = shared[key]
    if not ht.keep:
        return _Pricing(states, tables, [None] * len(tables))
    keep = dict(ht.keep)
    kept_tables: list[_Table] = []
    saved: list[np.ndarray | None] = []
    for tb in tables:
        ch = tb.choices
        if not any(gi in keep for gi in ch.groups):
            if not ht.residents_only:  # nothing of this job's may land on a drained host
                kept_tables.append(tb)
                saved.append(None)
            continue
        value = np.zeros(len(ch.cores))
        allowed = np.ones(len(ch.cores), dtype=bool)
        for col, gi in enumerate(ch.groups):
            saving = keep.get(gi, (0.0,))
            value = value + _kept(saving, ch.counts[:, col])
            allowed &= ch.counts[:, col] <= len(saving) - 1
        kept_tables.append(tb)
        saved.append(np.where(allowed, value, NEG) if ht.residents_only else value)
    return _Pricing(states, kept_tables, saved)


def _tables(pb: ChunkProblem, t: int) -> tuple[_States, list[_Table]]:
    cap = pb.types[t].cores
    states = _States(tuple(sorted({g.cores for g in pb.groups if g.devil})), pb.types[t].tolerance)
    out = []
    cols = np.arange(cap + 1)
    for ii, item in enumerate(pb.jobs):
        for ch in _choices(pb, item, cap):
            if len(ch.cores) <= 1:
                continue
            # Index into a row padded with cap + 1 NEG cells in front: c - shift.
            index = (cap + 1) + cols[None, :] - ch.cores[:, None]
            nexts = np.vstack([states.after(z, ch) for z in range(states.count)])
            nexts[:, 0] = -1  # the empty choice is the DP's copy
            moves = []
            for z2 in range(states.count):
                zs, rows = np.nonzero(nexts == z2)
                if len(zs):
                    moves.append((z2, zs, rows))
            out.append(_Table(ii, ch, index, tuple(moves)))
    return states, out


@dataclass(frozen=True)
class _Duals:
    count: np.ndarray  # per type, <= 0
    cover: np.ndarray  # per group, in [0, BIG]
    lag: np.ndarray  # per item, >= 0 (straggler rows)
    chunk: np.ndarray  # per item, in [0, 1] (chunk rows)
    calm: np.ndarray  # per item, in [0, 1] (crossing rows); chunk + calm <= 1
    power: float = 0.0  # the power floor row's, in [0, 1]


def _values(pb: ChunkProblem, ii: int, ch: _Choices, du: _Duals, contended: bool) -> np.ndarray:
    item = pb.jobs[ii]
    value: np.ndarray = ch.counts @ du.cover[list(ch.groups)]
    if item.inside is not None and du.chunk[ii] > 0:  # never a job split by group
        value = value + du.chunk[ii] * item.inside[ch.size]
    if contended:
        value = value - du.lag[ii] * ch.devils
    return value


def _price(
    pb: ChunkProblem, t: int, pricing: _Pricing, du: _Duals, contended: bool
) -> tuple[float, ChunkColumn | None]:
    """The least reduced cost of a pattern of type t (without the type's count dual) and
    the pattern; calm patterns only, or any with every devil charged its lag dual."""
    ht = pb.types[t]
    cap = ht.cores
    calm = pricing.states
    paid = 1.0 - du.power  # the power floor row pays back a share of every watt
    states = 1 if contended else calm.count
    dp = np.full((states, cap + 1), NEG)
    dp[0, 0] = 0.0
    trail = []
    every = np.arange(cap + 1)
    for tb, saved in zip(pricing.tables, pricing.saved, strict=True):
        ch = tb.choices
        value = _values(pb, tb.item, ch, du, contended) - paid * ht.slope * ch.cores
        if saved is not None:
            value = value + saved
        new = dp.copy()
        arg = np.full((states, cap + 1), -1, dtype=np.int64)
        pad = np.concatenate([np.full((states, cap + 1), NEG), dp], axis=1)
        if contended:
            cand = pad[0][tb.index[1:]] + value[1:, None]
            best = cand.argmax(axis=0)
            got = cand[best, every]
            better = got > new[0]
            new[0][better] = got[better]
            arg[0][better] = (best[better] + 1) * states
        else:
            for z2, zs, rows in tb.moves:
                cand = pad[zs[:, None], tb.index[rows]] + value[rows][:, None]
                best = cand.argmax(axis=0)
                got = cand[best, every]
                better = got > new[z2]
                new[z2][better] = got[better]
                arg[z2][better] = rows[best[better]] * states + zs[best[better]]
        trail.append((tb, saved, arg))
        dp = new
    dp[:, 0] = NEG
    z, c = (int(v) for v in np.unravel_index(int(np.argmax(dp)), dp.shape))
    most = float(dp[z, c])
    if most <= NEG / 2:
        return 0.0, None
    counts: Counter[int] = Counter()
    devils = devil_cores = 0
    kept = 0.0
    for tb, saved, arg in reversed(trail):
        code = int(arg[z, c])
        if code < 0:
            continue
        row, z = divmod(code, states)
        ch = tb.choices
        if saved is not None:
            kept += float(saved[row])
        c -= int(ch.cores[row])
        devils += int(ch.devils[row])
        devil_cores += int(ch.devil_cores[row])
        for gi, n in zip(ch.groups, ch.counts[row], strict=True):
            if n:
                counts[gi] += int(n)
    if c != 0 or z != 0:
        raise RuntimeError("chunk pricing: a pattern did not trace back to an empty host")
    used = sum(pb.groups[gi].cores * n for gi, n in counts.items())
    hot = devils >= 2 and devil_cores > ht.tolerance
    watts = ht.switch_on + ht.slope * used
    column = ChunkColumn(t, tuple(sorted(counts.items())), watts, hot, kept)
    return paid * ht.switch_on - most, column


# --- the master ---------------------------------------------------------------------


class _Master:
    def __init__(self, pb: ChunkProblem) -> None:
        lp = master_lp()
        self.pb, self.lp = pb, lp
        inf = lp.infinity()
        objective = lp.Objective()
        objective.SetMinimization()
        self.count = [lp.Constraint(-inf, ht.hosts) for ht in pb.types]
        self.cover = [lp.Constraint(g.count, inf) for g in pb.groups]
        for row in self.cover:
            slack = lp.NumVar(0.0, inf, "")
            objective.SetCoefficient(slack, BIG)
            row.SetCoefficient(slack, 1.0)
        self.lag: dict[int, pywraplp.Constraint] = {}
        self.chunk: dict[int, pywraplp.Constraint] = {}
        self.calm: dict[int, pywraplp.Constraint] = {}
        for ii, item in enumerate(pb.jobs):
            y = None
            if item.devils:
                y = lp.NumVar(0.0, 1.0, "")
                objective.SetCoefficient(y, item.devil_cost)
                self.lag[ii] = lp.Constraint(0.0, inf)  # devils * y - contended ones >= 0
                self.lag[ii].SetCoefficient(y, float(item.devils))
            if not item.talks:
                continue
            c = lp.NumVar(item.floor, inf, "")
            objective.SetCoefficient(c, 1.0)
            if item.inside is not None:
                self.chunk[ii] = lp.Constraint(item.whole, inf)
                self.chunk[ii].SetCoefficient(c, 1.0)
            if y is not None and item.crossing > 0:
                self.calm[ii] = lp.Constraint(item.floor + item.crossing, inf)
                self.calm[ii].SetCoefficient(c, 1.0)
                self.calm[ii].SetCoefficient(y, item.crossing)
        self.item_of = {}
        for ii, item in enumerate(pb.jobs):
            for gi in item.groups:
                self.item_of[gi] = ii
        # Watts short of the floor cost what drawing them would: the dual stays in [0, 1].
        self.power: pywraplp.Constraint | None = None
        if pb.watts_floor > 0:
            self.power = lp.Constraint(pb.watts_floor, inf)
            short = lp.NumVar(0.0, inf, "")
            objective.SetCoefficient(short, 1.0)
            self.power.SetCoefficient(short, 1.0)
        self.objective = objective
        self.seen: set[ChunkColumn] = set()
        self.vars: list[tuple[ChunkColumn, int]] = []  # each column's variable index
        self.values: np.ndarray | None = None  # the last solve's primal

    def add(self, col: ChunkColumn) -> bool:
        if col in self.seen:
            return False
        self.seen.add(col)
        var = self.lp.NumVar(0.0, self.lp.infinity(), "")
        self.vars.append((col, var.index()))
        self.objective.SetCoefficient(var, col.cost - col.kept)
        self.count[col.host_type].SetCoefficient(var, 1.0)
        if self.power is not None:
            self.power.SetCoefficient(var, col.cost)
        per_item: Counter[int] = Counter()
        devils: Counter[int] = Counter()
        for gi, n in col.counts:
            self.cover[gi].SetCoefficient(var, float(n))
            ii = self.item_of[gi]
            per_item[ii] += n
            if self.pb.groups[gi].devil:
                devils[ii] += n
        for ii, n in per_item.items():
            inside = self.pb.jobs[ii].inside
            if ii in self.chunk and inside is not None:
                self.chunk[ii].SetCoefficient(var, float(inside[n]))
        if col.contended:
            for ii, n in devils.items():
                self.lag[ii].SetCoefficient(var, -float(n))
        return True

    def primal(self) -> tuple[tuple[ChunkColumn, float], ...]:
        """The columns the last solve uses, with their values."""
        if self.values is None:
            return ()
        x = self.values
        return tuple((col, float(x[i])) for col, i in self.vars if i < len(x) and x[i] > EPS)

    def solve(self, deadline: float) -> _Duals | None:
        """The master's duals, clipped to their signs; None if GLOP did not finish."""
        response = solve_master(self.lp, deadline)
        if response is None:
            return None
        d = np.asarray(response.dual_value)
        self.values = np.asarray(response.variable_value)
        pb = self.pb
        n = len(pb.jobs)
        lag, chunk, calm = np.zeros(n), np.zeros(n), np.zeros(n)
        for ii, row in self.lag.items():
            lag[ii] = max(0.0, d[row.index()])
        for ii, row in self.chunk.items():
            chunk[ii] = min(1.0, max(0.0, d[row.index()]))
        for ii, row in self.calm.items():
            calm[ii] = min(1.0, max(0.0, d[row.index()]))
        over = chunk + calm
        scale = np.where(over > 1.0, 1.0 / np.maximum(over, EPS), 1.0)
        return _Duals(
            np.minimum(0.0, d[[row.index() for row in self.count]]),
            np.clip(d[[row.index() for row in self.cover]], 0.0, BIG),
            lag,
            chunk * scale,
            calm * scale,
            0.0 if self.power is None else min(1.0, max(0.0, d[self.power.index()])),
        )


def _lagrangian(pb: ChunkProblem, du: _Duals, least: list[float]) -> float:
    """Farley's bound for these duals: any duals give one, so they are clipped to their
    signs (and a job's C duals to a sum of 1) rather than trusted."""
    value = pb.constant + float(du.cover @ np.asarray([g.count for g in pb.groups]))
    value += du.power * pb.watts_floor
    for ii, item in enumerate(pb.jobs):
        if item.devils:
            y_cost = item.devil_cost - du.lag[ii] * item.devils - du.calm[ii] * item.crossing
            value += min(0.0, y_cost)
        if item.talks:
            value += du.chunk[ii] * item.whole + du.calm[ii] * (item.floor + item.crossing)
            value += (1.0 - du.chunk[ii] - du.calm[ii]) * item.floor
    for ht, rc in zip(pb.types, least, strict=True):
        value += ht.hosts * min(0.0, rc)
    return value


def container_groups(pb: ChunkProblem, inst: Instance) -> list[int | None]:
    """Per container, its group: its job's of its size and class, else the silent
    turtles' of its size (None if the problem has neither)."""
    key = {(g.job, g.cores, g.devil): gi for gi, g in enumerate(pb.groups)}
    return [
        key.get((c.job, c.cores, c.devil), key.get((-1, c.cores, c.devil))) for c in inst.containers
    ]


def columns_of(pb: ChunkProblem, inst: Instance, assignment: Assignment) -> list[ChunkColumn]:
    """The patterns of a placement's hosts, as columns of their types ([] if the
    placement uses a host the problem does not)."""
    by_host: dict[int, Counter[int]] = defaultdict(Counter)
    for gi, h in zip(container_groups(pb, inst), assignment, strict=True):
        if gi is None:
            return []
        by_host[h][gi] += 1
    out = []
    for h, counts in by_host.items():
        t = pb.type_of[h]
        if t < 0:
            return []
        ht = pb.types[t]
        used = sum(pb.groups[gi].cores * n for gi, n in counts.items())
        devils = sum(n for gi, n in counts.items() if pb.groups[gi].devil)
        dc = sum(n * pb.groups[gi].cores for gi, n in counts.items() if pb.groups[gi].devil)
        hot = is_contended(devils, dc, ht.tolerance)
        keep = dict(ht.keep)
        kept = sum(float(_kept(keep[gi], np.asarray(n))) for gi, n in counts.items() if gi in keep)
        watts = ht.switch_on + ht.slope * used
        out.append(ChunkColumn(t, tuple(sorted(counts.items())), watts, hot, kept))
    return out


def _reduced(pb: ChunkProblem, col: ChunkColumn, du: _Duals, item_of: dict[int, int]) -> float:
    """A column's reduced cost at the duals, the type's count dual included."""
    value = (1.0 - du.power) * col.cost - col.kept - float(du.count[col.host_type])
    per_item: Counter[int] = Counter()
    for gi, n in col.counts:
        value -= du.cover[gi] * n
        ii = item_of[gi]
        per_item[ii] += n
        if col.contended and pb.groups[gi].devil:
            value += du.lag[ii] * n
    for ii, n in per_item.items():
        inside = pb.jobs[ii].inside
        if inside is not None:
            value -= du.chunk[ii] * float(inside[n])
    return value


def _mix(a: _Duals, b: _Duals, alpha: float) -> _Duals:
    """alpha * a + (1 - alpha) * b, field by field (still within every field's signs)."""
    fields = zip(vars(a).values(), vars(b).values(), strict=True)
    return _Duals(*(alpha * x + (1 - alpha) * y for x, y in fields))


def solve(
    pb: ChunkProblem,
    deadline: float,
    *,
    inst: Instance,
    start: Assignment | None = None,
    paced: bool = False,
) -> ChunkAnswer:
    """Column generation until no pattern prices out, MAX_ROUNDS or the deadline; the best
    Lagrangian bound of the rounds finished. Duals are smoothed towards those of the best
    bound so far (Wentges): pricing there gives the bound, and a pattern it finds joins
    the master if it prices out at the master's own duals; a round whose patterns all
    fail that prices at the master's duals alone. ``start``'s hosts are the first
    columns. ``paced``: stop after the first round if, at its pace, the master would not
    settle by the deadline (ROUNDS_PER_GROUP): a bound that has not settled is far
    below the pool's (1,024 hosts: 0.258 after 4 s, 0.290 settled in 7 s, the pool's
    0.288), and the time is the search's."""
    master = _Master(pb)
    if start is not None:
        for col in columns_of(pb, inst, start):
            master.add(col)
    shared: dict[tuple[int, int], tuple[_States, list[_Table]]] = {}
    tables = [_pricing(pb, t, shared) for t in range(len(pb.types))]
    began = time.monotonic()  # the pace is the rounds', not the tables'
    best, rounds, converged = -math.inf, 0, False
    center: _Duals | None = None
    while rounds < MAX_ROUNDS and time.monotonic() < deadline:
        du = master.solve(deadline)
        if du is None:
            break
        for alpha in (SMOOTHING, 0.0) if center is not None else (0.0,):
            at = du if alpha == 0.0 or center is None else _mix(center, du, alpha)
            least, added = [], 0
            for t in range(len(pb.types)):
                low = 0.0
                for contended in (False, True):
                    if time.monotonic() >= deadline:
                        return ChunkAnswer(best, rounds, False, len(master.seen), master.primal())
                    reduced, found = _price(pb, t, tables[t], at, contended)
                    low = min(low, reduced)
                    if (
                        found is not None
                        and _reduced(pb, found, du, master.item_of) < -EPS
                        and master.add(found)
                    ):
                        added += 1
                least.append(low)
            bound = _lagrangian(pb, at, least)
            if bound > best:
                best, center = bound, at
            if added:
                break
        rounds += 1
        if added == 0:  # priced at the master's own duals: nothing prices out
            converged = True
            break
        if paced and rounds == 1:
            pace = time.monotonic() - began
            if began + pace * ROUNDS_PER_GROUP * len(pb.groups) > deadline:
                break
    return ChunkAnswer(best, rounds, converged, len(master.seen), master.primal())
