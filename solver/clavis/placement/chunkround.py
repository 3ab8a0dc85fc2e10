"""A placement rounded from the chunk master: its patterns know which job runs where.

The pool rounding (pool.round_by_jobs) lays patterns that count containers by size and
class only and fills them job by job; the search after it keeps what that chose. On the
realistic 1,024-host snapshot of seed 4 (weights 6,5,7) the chunk master (chunks.py)
runs a stencil job of 128 8-core turtles as 21 hosts of 64 cores with six of them
beside a calm devil, where the answer of a 60 s search had it in threes on 41 hosts of
32 cores: the search had used the large hosts for other jobs and no move of a few
containers leads back. The chunk master's columns are host templates that say how many
containers of which job each host runs, so rounding them keeps its chunks:

1. *Templates.* Each column runs on the floor of its value in hosts; then columns with
   the largest fractions are taken once more, while their type has hosts left and they
   cover containers still short.
2. *Racks.* Talking jobs, most traffic first, lay the templates they are in on hosts of
   the template's type, in the rack that holds most of the job's templates already,
   else in the rack that can take most of what the job still needs: a job's chunks
   then share racks as far as the host types allow.
3. *Containers.* Each job's containers fill its slots in region-growing order
   (locality.py) and template by template in rack order, so a ring or a grid comes in
   runs and blocks; the search deals rings and grids again over their places
   (relayout.py).
4. *The rest.* Containers left without a slot (the fractions rounded down) go next to
   their job on a host with room that stays calm for them, else on any such host in
   use, else on a host switched on for them.

The caller scores the result and lets the host search polish it as a second start.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from clavis.instance import Assignment, Instance
from clavis.objectives import is_contended
from clavis.placement import chunks, locality
from clavis.placement.chunks import ChunkColumn, ChunkProblem

EPS = 1e-6


@dataclass
class _Host:
    """One up host as the rounding fills it."""

    index: int
    free: int
    devils: int = 0
    devil_cores: int = 0
    jobs: set[int] = field(default_factory=set)


def templates(
    pb: ChunkProblem, primal: tuple[tuple[ChunkColumn, float], ...], up: float = 0.0
) -> list[ChunkColumn]:
    """The master's columns as whole hosts: floors first, then the largest fractions
    that still cover something, within each type's hosts."""
    free = [ht.hosts for ht in pb.types]
    short = [g.count for g in pb.groups]
    out: list[ChunkColumn] = []
    for col, x in sorted(primal, key=lambda cx: -cx[1]):
        n = min(math.floor(x + EPS), free[col.host_type])
        free[col.host_type] -= n
        out += [col] * n
        for gi, k in col.counts:
            short[gi] -= k * n
    fractions = sorted(
        ((x - math.floor(x + EPS), col) for col, x in primal if x - math.floor(x + EPS) > up + EPS),
        key=lambda fc: -fc[0],
    )
    for _, col in fractions:
        if free[col.host_type] <= 0 or not any(short[gi] > 0 for gi, _ in col.counts):
            continue
        free[col.host_type] -= 1
        out.append(col)
        for gi, k in col.counts:
            short[gi] -= k
    return out


def _usable(inst: Instance, pb: ChunkProblem) -> list[int]:
    """The hosts a template may run on: up hosts of a type (the rounding fills no others:
    it places solves without a current placement)."""
    return [hi for hi, t in enumerate(pb.type_of) if t >= 0 and inst.hosts[hi].state == "up"]


def lay(inst: Instance, pb: ChunkProblem, tpls: list[ChunkColumn]) -> dict[int, ChunkColumn]:
    """Host per template, talking jobs first and each kept in as few racks as the types
    allow (step 2 of the module's note); templates that do not fit are dropped (their
    containers become the rest)."""
    free: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for hi in _usable(inst, pb):  # in index order: each rack's list stays sorted
        free[pb.type_of[hi]][inst.hosts[hi].rack].append(hi)
    jobs_of: list[set[int]] = []
    for col in tpls:
        jobs_of.append({pb.groups[gi].job for gi, _ in col.counts if pb.groups[gi].job >= 0})
    waiting: dict[int, list[int]] = defaultdict(list)  # per job, its templates not laid
    for ti, js in enumerate(jobs_of):
        for j in js:
            waiting[j].append(ti)
    laid: dict[int, ChunkColumn] = {}
    done = [False] * len(tpls)
    racks_of: dict[int, Counter[int]] = defaultdict(Counter)  # per job, templates per rack

    def put(ti: int, rack: int) -> bool:
        hs = free[tpls[ti].host_type].get(rack)
        if not hs:
            return False
        hi = hs.pop(0)
        laid[hi] = tpls[ti]
        done[ti] = True
        for j in jobs_of[ti]:
            racks_of[j][rack] += 1
        return True

    traffic = inst.job_traffic
    for job in sorted(waiting, key=lambda j: (-traffic[j], j)):
        todo = [ti for ti in waiting[job] if not done[ti]]
        while todo:
            need = Counter(tpls[ti].host_type for ti in todo)
            racks = sorted({rk for t in need for rk, hs in free[t].items() if hs})
            if not racks:
                break
            rack = max(racks, key=lambda rk: _room(free, need, rk, racks_of[job][rk] > 0))
            placed = [ti for ti in todo if put(ti, rack)]
            if not placed:
                break
            todo = [ti for ti in todo if not done[ti]]
    for ti, col in enumerate(tpls):  # silent templates, and talking ones left over
        if done[ti]:
            continue
        for rk in sorted(free[col.host_type]):
            if put(ti, rk):
                break
    return laid


def _room(
    free: dict[int, dict[int, list[int]]], need: Counter[int], rack: int, held: bool
) -> tuple[bool, int]:
    """How a job ranks a rack: one it holds templates in first, then by how many of the
    templates it still needs the rack's free hosts take."""
    return held, sum(min(n, len(free[t].get(rack, []))) for t, n in need.items())


def round_master(
    inst: Instance,
    pb: ChunkProblem,
    primal: tuple[tuple[ChunkColumn, float], ...],
    deadline: float,
    up: float = 0.0,
) -> Assignment | None:
    """A placement from the master's columns (the module's note), or None if the
    deadline passes or some container finds no host."""
    if not primal:
        return None
    tpls = templates(pb, primal, up)
    laid = lay(inst, pb, tpls)
    # A job lags where the master runs any of its devils on a contended host.
    lagging = {
        pb.groups[gi].job
        for col in tpls
        if col.contended
        for gi, _n in col.counts
        if pb.groups[gi].devil
    }
    if time.monotonic() >= deadline:
        return None
    hosts = {hi: _Host(hi, inst.hosts[hi].cores) for hi in _usable(inst, pb)}
    members: dict[int, list[int]] = defaultdict(list)
    for ci, gi in enumerate(chunks.container_groups(pb, inst)):
        if gi is None:
            return None
        members[gi].append(ci)
    order = sorted(laid, key=lambda hi: (inst.hosts[hi].rack, hi))
    # Per job, its slots host by host in rack order; its containers grown into regions
    # of those sizes (step 3), each group then taken in that order.
    slots: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # job -> (host, gi, n)
    for hi in order:
        for gi, n in laid[hi].counts:
            slots[pb.groups[gi].job].append((hi, gi, n))
    nbrs = locality.neighbours(inst)
    rank: dict[int, int] = {}
    for job, held in slots.items():
        if job < 0:
            continue
        sizes: list[int] = []
        last = -1
        for hi, _gi, n in held:
            if hi == last:
                sizes[-1] += n
            else:
                sizes.append(n)
            last = hi
        mine = list(inst.job_containers[job])
        rank.update((ci, r) for r, ci in enumerate(locality.grown(mine, nbrs, sizes)))
    for ms in members.values():
        ms.sort(key=lambda ci: (inst.containers[ci].job, rank.get(ci, ci)))
    assignment: list[int | None] = [None] * len(inst.containers)
    left = {gi: _Left(ms) for gi, ms in members.items()}
    group = {ci: gi for gi, ms in members.items() for ci in ms}
    for job, held in slots.items():
        if time.monotonic() >= deadline:
            return None
        per_host: dict[int, dict[int, int]] = defaultdict(dict)
        for hi, gi, n in held:
            per_host[hi][gi] = per_host[hi].get(gi, 0) + n
        for hi, needs in per_host.items():
            host = hosts[hi]  # lay uses usable hosts only
            picked = _chunk(nbrs, left, group, needs, rank) if job >= 0 else _firsts(left, needs)
            for ci in picked:
                _seat(inst, host, ci)
                assignment[ci] = hi
    rest = [ci for gi in members for ci in left[gi].remaining()]
    # Devils first: they have fewer places that keep them calm.
    rest.sort(key=lambda ci: (not inst.containers[ci].devil, -inst.containers[ci].cores, ci))
    for ci in rest:
        if time.monotonic() >= deadline:
            return None
        at = _rest_host(inst, hosts, ci, lagging)
        if at is None:
            return None
        _seat(inst, hosts[at], ci)
        assignment[ci] = at
    if any(a is None for a in assignment):
        return None
    return tuple(a for a in assignment if a is not None)


class _Left:
    """A group's containers not placed yet, in region order."""

    def __init__(self, members: list[int]) -> None:
        self.members = members
        self.at = 0  # members before this are all taken
        self.taken: set[int] = set()

    def first(self) -> int | None:
        while self.at < len(self.members) and self.members[self.at] in self.taken:
            self.at += 1
        return self.members[self.at] if self.at < len(self.members) else None

    def take(self, ci: int) -> None:
        self.taken.add(ci)

    def remaining(self) -> list[int]:
        return [ci for ci in self.members[self.at :] if ci not in self.taken]


def _firsts(left: dict[int, _Left], needs: dict[int, int]) -> list[int]:
    """The first containers left of each group, as many as needed."""
    out = []
    for gi, n in needs.items():
        for _ in range(n):
            ci = left[gi].first()
            if ci is None:
                break
            left[gi].take(ci)
            out.append(ci)
    return out


def _chunk(
    nbrs: dict[int, list[tuple[int, float]]],
    left: dict[int, _Left],
    group: dict[int, int],
    needs: dict[int, int],
    rank: dict[int, int],
) -> list[int]:
    """A job's containers for one host, ``needs[gi]`` of each group: grown from the first
    left in region order, each next the one of a group still short with most traffic
    into those taken (ties to region order), so a chunk that must mix devils and
    turtles still takes neighbours."""
    short = dict(needs)
    gain: dict[int, float] = defaultdict(float)
    out: list[int] = []
    while any(n > 0 for n in short.values()):
        ready = [ci for ci in gain if short.get(group[ci], 0) > 0]
        if ready:
            pick = max(ready, key=lambda ci: (gain[ci], -rank.get(ci, 0)))
        else:
            firsts = [left[gi].first() for gi, n in short.items() if n > 0]
            heads = [head for head in firsts if head is not None]
            if not heads:
                break
            pick = min(heads, key=lambda head: rank.get(head, 0))
        gi = group[pick]
        left[gi].take(pick)
        short[gi] -= 1
        gain.pop(pick, None)
        out.append(pick)
        for v, w in nbrs.get(pick, ()):
            g = group.get(v)
            if g is not None and g in short and v not in left[g].taken:
                gain[v] += w
    return out


def _seat(inst: Instance, host: _Host, ci: int) -> None:
    c = inst.containers[ci]
    host.free -= c.cores
    host.jobs.add(c.job)
    if c.devil:
        host.devils += 1
        host.devil_cores += c.cores


def _stays_calm(inst: Instance, host: _Host, ci: int) -> bool:
    """Whether the host is calm with one more container ``ci`` (a devil)."""
    devil_cores = host.devil_cores + inst.containers[ci].cores
    return not is_contended(host.devils + 1, devil_cores, inst.hosts[host.index].devil_tolerance)


def _contended(inst: Instance, host: _Host) -> bool:
    return is_contended(host.devils, host.devil_cores, inst.hosts[host.index].devil_tolerance)


def _rest_host(inst: Instance, hosts: dict[int, _Host], ci: int, lagging: set[int]) -> int | None:
    """A host for a container without a slot, among those with room: a calm job's devil
    where it stays calm, a lagging job's on a contended host if one has room, a turtle
    anywhere; of those, one of its job's, else the fullest host in use, else the
    smallest empty host; else any host with room (the devil then contends)."""
    c = inst.containers[ci]
    fits = [h for h in hosts.values() if h.free >= c.cores]
    if not fits:
        return None
    if c.devil and c.job in lagging:
        hot = [h for h in fits if _contended(inst, h)]
        pool = hot or [h for h in fits if _stays_calm(inst, h, ci)] or fits
    elif c.devil:
        pool = [h for h in fits if _stays_calm(inst, h, ci)] or fits
    else:
        pool = fits
    own = [h for h in pool if c.job in h.jobs]
    if own:
        return min(own, key=lambda h: (h.free, h.index)).index
    busy = [h for h in pool if h.jobs]
    if busy:
        return min(busy, key=lambda h: (h.free, h.index)).index
    return min(pool, key=lambda h: (inst.hosts[h.index].cores, h.index)).index
