"""Large neighbourhood search over racks: improve a placement a few racks at a time.

F is a sum over racks of what each rack's configuration costs (power, contention
inside hosts, traffic kept inside hosts and inside the rack; bound.py), plus the
straggler charge of every lagging job. Free a few racks, keep how many members of each
group they hold together, and the best way to seat those members on those racks is a
small rack model (rackmodel.py) that CP-SAT solves in a fraction of a second; every
other rack keeps its configuration, so the change in F is exactly the change in the
freed racks' costs and charges. This is the thesis's fathoming (§5.5.2: build a good
schedule from the bound's structure, keep it if it beats the incumbent) done as local
search, which on the Table 5.3 instances reaches in seconds what CP-SAT's generic
search over all 1,024 hosts reaches in minutes.

Two neighbourhoods, drawn at random:

* two racks, at least one of which runs something (the other may be an empty one);
* every rack where one lagging devil job sits on a contended host (at most
  ``JOB_RACKS``), one more rack and an empty one, so that the job may stop lagging:
  the straggler rule charges a job once for all of its contended hosts, so no pair of
  racks can take that charge away from a job that contends on three.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable

from ortools.sat.python import cp_model

from clavis.instance import Assignment, Instance
from clavis.placement import rackmodel
from clavis.placement.bound import RackProblem, configuration, decode, rack_uses
from clavis.placement.hints import complete_hint

Uses = dict[tuple[int, int], int]  # (class, pattern) -> hosts of one rack running it

JOB_RACKS = 4  # most racks a job neighbourhood frees besides the extra and the spare
SUB_SECONDS = 0.5  # most one neighbourhood's CP-SAT solve may take, per SUB_VARS
# Configuration variables per SUB_SECONDS. With a current placement each occupied host
# is a class of its own (rackmodel.py), so two racks of 32 hosts are ~1,800 variables
# instead of ~100, and 0.5 s ended every such solve at its hint (measured, 96 hosts).
SUB_VARS = 800
MAX_TRIES = 100_000  # neighbourhoods per call at most, whatever the time limit
MAX_REPEATS = 2_000  # draws in a row of neighbourhoods known to fail: a local optimum
SIGNIFICANT = 1e-4  # an improvement of F that resets the patience (F spans about 1)


@dataclasses.dataclass
class Search:
    """The placement being improved, held as one configuration per rack."""

    pb: RackProblem
    uses: list[Uses]

    def configuration(self, r: int) -> tuple[tuple[int, ...], float]:
        return configuration(self.pb, ((ci, pi, n) for (ci, pi), n in self.uses[r].items()))

    def counts(self, r: int) -> tuple[int, ...]:
        return self.configuration(r)[0]

    def contended(self, r: int) -> set[int]:
        """Devil jobs with a container on a contended host of rack ``r``."""
        out: set[int] = set()
        for (ci, pi), n in self.uses[r].items():
            p = self.pb.patterns[ci][pi]
            if n and p.contended:
                out |= p.devil_jobs
        return out

    def lagging(self) -> frozenset[int]:
        return frozenset(set().union(*(self.contended(r) for r in range(len(self.uses)))))

    def busy(self, r: int) -> bool:
        return any(
            n and any(self.pb.patterns[ci][pi].counts) for (ci, pi), n in self.uses[r].items()
        )


def _neighbourhood(s: Search, rng: random.Random) -> list[int] | None:
    racks = range(len(s.uses))
    busy = [r for r in racks if s.busy(r)]
    spare = [r for r in racks if not s.busy(r)][:1]
    lagging = sorted(s.lagging())
    if lagging and rng.random() < 0.5:
        job = rng.choice(lagging)
        holding = [r for r in busy if job in s.contended(r)]
        if len(holding) <= JOB_RACKS:
            return sorted({*holding, rng.choice(busy), *spare})
    pair = rng.sample(busy + spare, min(2, len(busy) + len(spare)))
    return sorted(pair) if any(r in busy for r in pair) else None


def _sub_problem(s: Search, racks: list[int], sizes: list[int]) -> RackProblem:
    """The freed racks as a problem of their own: their members (``sizes`` of each
    group), their racks."""
    pb = s.pb
    groups = [
        dataclasses.replace(g, members=g.members[:n]) for g, n in zip(pb.groups, sizes, strict=True)
    ]
    type_of = {r: rt for rt, rs in enumerate(pb.racks_of_type) for r in rs}
    racks_of_type: list[list[int]] = [[] for _ in pb.rack_types]
    for local, r in enumerate(racks):
        racks_of_type[type_of[r]].append(local)
    return dataclasses.replace(
        pb,
        groups=groups,
        racks=[pb.racks[r] for r in racks],
        rack_hosts=[pb.rack_hosts[r] for r in racks],
        rack_counts=[len(rs) for rs in racks_of_type],
        racks_of_type=racks_of_type,
    )


def _reseat(s: Search, racks: list[int], seconds: float, seed: int) -> list[Uses] | None:
    """The best configurations of ``racks`` for the members they hold, or None."""
    counts = {r: s.counts(r) for r in racks}
    sizes = [sum(col) for col in zip(*counts.values(), strict=True)]
    # The rack model orders identical racks by their count of the largest group (the
    # first of the largest, as rackmodel does); hand it the racks in that order so that
    # the current configuration is a valid hint.
    big = max(range(len(sizes)), key=lambda gi: sizes[gi])
    racks = sorted(racks, key=lambda r: -counts[r][big])
    model, v = rackmodel.build_rack_model(_sub_problem(s, racks, sizes))
    seconds = min(seconds, SUB_SECONDS * max(1.0, len(v.x) / SUB_VARS))
    elsewhere = set().union(*(s.contended(r) for r in range(len(s.uses)) if r not in racks))
    for job, lagging in v.lagging.items():
        if job in elsewhere:  # charged by another rack whatever happens here
            model.add(lagging == 1)
    for (local, ci, pi), x in v.x.items():
        model.add_hint(x, s.uses[racks[local]].get((ci, pi), 0))
    # A complete hint is CP-SAT's first solution at once; a partial one costs search.
    complete_hint(model, v.x.values(), seconds)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    out: list[Uses] = [{} for _ in racks]
    for (local, ci, pi), x in v.x.items():
        n = int(solver.value(x))
        if n:
            out[local][ci, pi] = n
    # Back in the caller's rack order.
    by_rack = dict(zip(racks, out, strict=True))
    return [by_rack[r] for r in sorted(racks)]


def total_cost(s: Search) -> float:
    """F up to a constant: configuration costs plus the straggler charges."""
    charges = s.pb.k_d * sum(s.pb.devil_cores[j] for j in s.lagging())
    return sum(s.configuration(r)[1] for r in range(len(s.uses))) + charges


def improve(
    pb: RackProblem,
    inst: Instance,
    assignment: Assignment,
    *,
    deadline: float,
    seed: int,
    patience: int = 200,
    found: Callable[[Assignment], None] | None = None,
) -> Assignment | None:
    """A better placement than ``assignment``, or None if no neighbourhood improved it.
    Stops at ``deadline``, at a local optimum, or when ``patience`` tries in a row gained
    less than SIGNIFICANT. ``found`` is called with each improvement (progress
    reports)."""
    s = Search(pb, [dict(u) for u in rack_uses(pb, assignment)])
    rng = random.Random(seed)
    cost = total_cost(s)
    improved = False
    idle = repeats = 0
    # A neighbourhood that failed is not tried again until one of its racks, or the set
    # of lagging jobs (which fixes what its racks may contend for free), has changed.
    version = [0] * len(s.uses)
    failed: dict[tuple[int, ...], tuple[tuple[int, ...], frozenset[int]]] = {}
    for _ in range(MAX_TRIES):
        left = deadline - time.monotonic()
        if left <= 0 or idle >= patience or repeats >= MAX_REPEATS:
            break
        racks = _neighbourhood(s, rng)
        if racks is None:
            continue
        state = (tuple(version[r] for r in racks), s.lagging())
        if failed.get(tuple(racks)) == state:
            repeats += 1
            continue
        repeats = 0
        new = _reseat(s, racks, left, rng.randrange(2**31))
        idle += 1
        if new is None:
            failed[tuple(racks)] = state
            continue
        old = [s.uses[r] for r in racks]
        for r, u in zip(racks, new, strict=True):
            s.uses[r] = u
        trial = total_cost(s)
        if trial < cost - 1e-12 * max(1.0, abs(cost)):
            if trial < cost - SIGNIFICANT:
                idle = 0  # crumbs of F do not keep the search going
            cost, improved = trial, True
            for r in racks:
                version[r] += 1
            if found is not None:
                now = _decode(s, inst)
                if now is not None:
                    found(now)
        else:
            for r, u in zip(racks, old, strict=True):
                s.uses[r] = u
            failed[tuple(racks)] = state
    return _decode(s, inst) if improved else None


def _decode(s: Search, inst: Instance) -> Assignment | None:
    per_rack = [tuple((ci, pi, n) for (ci, pi), n in u.items()) for u in s.uses]
    return decode(s.pb, inst, per_rack)
