"""What talking jobs must send together when the hosts that could hold them whole are
too few (issue 12).

traffic_floor (lower.py) bounds each job's C on its own, as if the cluster's largest
hosts were all its: on a cluster of mostly 32-core hosts with a few 64-core ones, every
stencil's floor is cut into 64-core blocks, while the few 64-core hosts hold only some of
them. This bound shares the hosts out. A linear programme chooses how many of each job's
containers run on hosts of each size (u), every container somewhere and no size's cores
overrun; on a host holding s of its containers a job keeps at most r(s) bytes/s of its
pairs per container there (a grid: the most neighbour pairs m lattice cells share,
shapes.lattice_most, over m, at its heaviest pair; a ring or a tree: m - 1 pairs; an
all-to-all entry: (m - 1) / 2 pairs), and it sends across hosts all its pairs less what
it keeps, at least its own host floor. Any placement gives such u, so the least sum over
the jobs is a lower bound on their C together (not on any one job's: the large hosts go
to whichever jobs gain most there). The rack part of each job's floor is added as it is.
The thesis bounds C per job only (§5.5.2); this is Clavis's own.

On the variety bench's one-rack cluster (300 hosts, 274 of 32 cores, 9 of 64) the C
floor of its talking jobs rises from 0.249 to 0.289 of C's range; where a quarter of the
hosts have 64 cores (the main bench) it equals traffic_floor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from clavis.instance import Instance
from clavis.placement import shapes
from clavis.placement.lower import (
    Component,
    _capacities,
    _keep,
    components,
    host_cost,
    traffic_floor_parts,
)

Kept = Callable[[int], float]  # containers on one host -> most bytes/s they keep


@dataclass
class _Job:
    cores: int  # per container (jobs of mixed sizes keep only their floor)
    size: int  # containers
    sent: float  # bytes/s of all its pairs
    parts: list[Kept] | None = None  # per talking part: what m of it keep at most


def _component_kept(comp: Component, largest: int) -> Kept:
    """At most what m containers of a connected set keep on one host."""
    shape, heaviest = comp.shape, max(comp.pairs)
    if shape is not None and shape.kind == "grid":
        d = len(shape.sides)
        return lambda m: shapes.lattice_most(m, d) * heaviest
    if shape is not None:  # a tree or a ring: a forest unless the whole ring
        whole = shape.kind == "ring"
        n = shape.size
        return lambda m: (n if whole and m >= n else max(0, m - 1)) * heaviest
    # Otherwise each container keeps at most its heaviest neighbours that fit beside it,
    # and every pair kept is counted from both ends.
    best = max(_keep(largest - c, items) for c, _, items in comp.nodes)
    return lambda m: m * best / 2


def _per_container(kept: Kept, most: int, size: int) -> float:
    """The most a container keeps on a host holding at most ``most`` of the job."""
    top = min(most, size)
    return max((kept(m) / m for m in range(1, top + 1)), default=0.0)


def _jobs(inst: Instance, which: set[int], largest: int) -> dict[int, _Job]:
    """The talking jobs ``which``; ``largest``: the cores of the largest usable host."""
    sizes: dict[int, set[int]] = defaultdict(set)
    for c in inst.containers:
        if c.job in which:
            sizes[c.job].add(c.cores)
    out = {
        j: _Job(
            min(cores),
            len(inst.job_containers[j]),
            inst.job_traffic[j],
            parts=[] if len(cores) == 1 else None,
        )
        for j, cores in sizes.items()
    }
    for comp in components(inst):
        job = out.get(comp.job)
        if job is not None and job.parts is not None:
            job.parts.append(_component_kept(comp, largest))
    for u in inst.uniform:
        job = out.get(inst.containers[u.members[0]].job)
        if job is not None and job.parts is not None:
            job.parts.append(_entry_kept(u.bytes_per_s))
    return out


def _entry_kept(bytes_per_s: float) -> Kept:
    """At most what m members of an all-to-all entry keep on one host: all their pairs."""
    return lambda m: bytes_per_s * m * (m - 1) / 2


# The last instance and jobs asked, and the floor: the pool prepares the same instance
# two or three times in one turn.
_LAST: list[tuple[Instance, frozenset[int], float]] = []


def capacity_floor(inst: Instance, which: set[int]) -> float:
    """A lower bound on the C of the talking jobs ``which`` together (bytes/s times link
    cost, as objectives.traffic counts it); 0 when there is nothing to bound."""
    key = frozenset(which)
    last = _LAST[0] if _LAST else None  # one read: another thread may replace it
    if last is not None and last[0] is inst and last[1] == key:
        return last[2]
    value = _floor(inst, which)
    _LAST[:] = [(inst, key, value)]
    return value


def _floor(inst: Instance, which: set[int]) -> float:
    usable = _capacities(inst)
    jobs = _jobs(inst, which, max(cap for _, cap in usable)) if usable else {}
    if not jobs:
        return 0.0
    floors = traffic_floor_parts(inst)  # per job: bytes/s cut across hosts, rack part
    per_host = host_cost(inst)
    cores_of: dict[int, int] = defaultdict(int)
    for _, cap in usable:
        cores_of[cap] += cap
    lp = pywraplp.Solver.CreateSolver("GLOP")
    if lp is None:
        raise RuntimeError("OR-Tools was built without GLOP")
    inf = lp.infinity()
    room = {cap: lp.Constraint(-inf, float(total)) for cap, total in cores_of.items()}
    objective = lp.Objective()
    objective.SetMinimization()
    own = rack_parts = 0.0
    for j, job in jobs.items():
        host_cut, rack_part = floors.get(j, (0.0, 0.0))
        own += per_host * host_cut
        rack_parts += rack_part
        cut = lp.NumVar(per_host * host_cut, inf, "")
        objective.SetCoefficient(cut, 1.0)
        if job.parts is None:
            continue  # mixed sizes: its floor only; its cores are counted below
        placed = lp.Constraint(job.size, job.size)
        sends = lp.Constraint(per_host * job.sent, inf)  # cut + what it keeps >= all
        sends.SetCoefficient(cut, 1.0)
        for cap in cores_of:
            most = cap // job.cores
            if most <= 0:
                continue
            u = lp.NumVar(0.0, job.size, "")
            placed.SetCoefficient(u, 1.0)
            room[cap].SetCoefficient(u, float(job.cores))
            keeps = sum(_per_container(kept, most, job.size) for kept in job.parts)
            sends.SetCoefficient(u, per_host * keeps)
    # Every other container takes cores somewhere too.
    others: dict[int, int] = defaultdict(int)
    for c in inst.containers:
        mine = jobs.get(c.job)
        if mine is None or mine.parts is None:
            others[c.cores] += 1
    for cores, count in others.items():
        placed = lp.Constraint(count, count)
        for cap in cores_of:
            if cap >= cores:
                v = lp.NumVar(0.0, count, "")
                placed.SetCoefficient(v, 1.0)
                room[cap].SetCoefficient(v, float(cores))
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return 0.0  # e.g. the containers do not fit at all: no bound from here
    # GLOP's tolerances are far below this margin (a billionth of all that is sent), and
    # the jobs' own floors hold whatever it returns.
    margin = 1e-9 * per_host * sum(job.sent for job in jobs.values())
    return max(own, float(objective.Value()) - margin) + rack_parts
