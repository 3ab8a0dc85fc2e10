"""Greedy schedules in the spirit of the thesis's elaborate fathoming (§5.5.2).

The thesis builds a greedy schedule from a predicted number of turtle-turtle and
devil-turtle pairs. Under the straggler rule a devil job gains only when *all* of its
devil containers are uncontended, so the decision that matters is per job: which devil
jobs to isolate. ``isolating`` places each devil container of the chosen jobs on a host
of its own and fills the rest of that host with turtles, then packs everything else
job by job (CoreRR). Sweeping how many devil jobs are isolated (largest first) gives one
candidate per count, like the thesis's sweep over pair counts; the best under F seeds
CP-SAT.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator

from clavis.instance import Assignment, HostSpec, Instance
from clavis.placement import locality
from clavis.placement.guard import Guard


def watts_per_core(spec: HostSpec) -> float:
    """What a core costs on a fully used host: its switch-on watts spread over its cores
    plus the slope (the rate lower.py's power relaxation buys cores at)."""
    return (spec.idle_w - spec.empty_w) / spec.cores + spec.slope_w


def _order(inst: Instance) -> list[int]:
    """Usable hosts, rack by rack, so consecutive hosts share a rack (cheap traffic); the
    racks whose cores cost fewest watts first, and so the hosts within a rack. On mixed
    host generations a packing in plain rack order powered the dearest hosts as often as
    the cheapest: on a realistic snapshot of 1,024 hosts its P term stayed 0.05 above the
    power relaxation, this order brings it within 0.007 (issue 12)."""
    up = [h for h, spec in enumerate(inst.hosts) if spec.state == "up"]
    cores: dict[int, int] = defaultdict(int)
    watts: dict[int, float] = defaultdict(float)
    for h in up:
        spec = inst.hosts[h]
        cores[spec.rack] += spec.cores
        watts[spec.rack] += spec.cores * watts_per_core(spec)

    def key(h: int) -> tuple[float, int, float, int]:
        spec = inst.hosts[h]
        return (watts[spec.rack] / cores[spec.rack], spec.rack, watts_per_core(spec), h)

    return sorted(up, key=key)


def isolating(
    inst: Instance, isolate: frozenset[int], near: list[int] | None = None
) -> Assignment | None:
    """Devil containers of the ``isolate`` jobs alone among turtles; the rest packed.
    ``near``: locality.order for the hosts' order (computed here if not given)."""
    hosts = _order(inst)
    free = {h: inst.hosts[h].cores for h in hosts}
    out = [-1] * len(inst.containers)
    # Each job's containers in region-growing order (locality.py): a host then holds a
    # compact block of a stencil, not a strip.
    if near is None:
        near = nearness(inst, hosts)

    def by_job(i: int) -> tuple[int, int]:
        return (inst.containers[i].job, near[i])

    # Jobs with devils that are not isolated: their devils keep off the isolated hosts,
    # so their turtles do too, or a ring of alternating devils and turtles would be cut
    # at every flow (seen on a realistic snapshot: a 256-ring's traffic x 80).
    crowded = {c.job for c in inst.containers if c.devil and c.job not in isolate}
    turtles = deque(
        sorted(
            (i for i, c in enumerate(inst.containers) if not c.devil and c.job not in crowded),
            key=by_job,
        )
    )
    lonely = sorted(
        (i for i, c in enumerate(inst.containers) if c.devil and c.job in isolate), key=by_job
    )
    k = 0
    for d in lonely:
        need = inst.containers[d].cores
        while k < len(hosts) and free[hosts[k]] < need:
            k += 1
        if k == len(hosts):
            return None
        h = hosts[k]
        out[d] = h
        free[h] -= need
        # Fill the host with turtles, in job order; skip those that do not fit.
        skipped: deque[int] = deque()
        while turtles and free[h] > 0:
            t = turtles.popleft()
            if inst.containers[t].cores <= free[h]:
                out[t] = h
                free[h] -= inst.containers[t].cores
            else:
                skipped.append(t)
            if len(skipped) > 8:  # bounded look-ahead keeps this linear
                break
        turtles.extendleft(reversed(skipped))
        k += 1
    # The other devils keep off the isolated ones' hosts: one of them there would make
    # the host contended and the isolated job lag after all (the straggler rule).
    calm = {out[d] for d in lonely}
    rest = [i for i, h in enumerate(out) if h == -1]
    rest.sort(key=by_job)
    lines = {"all": hosts, "crowd": [h for h in hosts if h not in calm]}
    # First fit in amortised linear time: free cores only go down, so a host too full for
    # a container of some size stays too full for it (one pointer per line and size).
    at: dict[tuple[str, int], int] = {}

    def fit(line: str, need: int) -> int | None:
        k, order = at.get((line, need), 0), lines[line]
        while k < len(order) and free[order[k]] < need:
            k += 1
        at[line, need] = k
        return order[k] if k < len(order) else None

    for i in rest:
        need = inst.containers[i].cores
        spot = fit("crowd", need) if inst.containers[i].job in crowded else None
        spot = spot if spot is not None else fit("all", need)
        if spot is None:
            return None
        out[i] = spot
        free[spot] -= need
    return tuple(out)


def nearness(inst: Instance, hosts: list[int]) -> list[int]:
    """locality.order with regions the size of the first host to be filled."""
    return locality.order(inst, inst.hosts[hosts[0]].cores if hosts else 1)


def sweep_order(n: int) -> list[int]:
    """0..n, ends first, then midpoints of ever finer halvings: cut short anywhere, the
    counts tried so far still spread over the whole range."""
    out = [0, n] if n > 0 else [0]
    seen = set(out)
    spans = [(0, n)]
    while spans:
        finer = []
        for lo, hi in spans:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                out.append(mid)
            finer += [(lo, mid), (mid, hi)]
        spans = finer
    return out


def candidates(inst: Instance, guard: Guard | None = None) -> Iterator[Assignment]:
    """Greedy schedules, one per number of isolated devil jobs, the counts in sweep order,
    for two rankings of the devil jobs in turn: largest first (the thesis's pairs sweep
    starts from the heaviest), and most devil cores per devil container first (each
    isolated devil takes a host, so these keep the most devil cores calm per host). With
    a ``guard``, none are started after its deadline (each costs a pass over every
    container and host: at 16,384 hosts the full sweep would take minutes)."""
    devil_cores: dict[int, int] = {}
    devils: dict[int, int] = {}
    for c in inst.containers:
        if c.devil:
            devil_cores[c.job] = devil_cores.get(c.job, 0) + c.cores
            devils[c.job] = devils.get(c.job, 0) + 1
    rankings = [
        sorted(devil_cores, key=lambda j: (-devil_cores[j], j)),
        sorted(devil_cores, key=lambda j: (-devil_cores[j] / devils[j], devils[j], j)),
    ]
    tried: set[frozenset[int]] = set()
    near = nearness(inst, _order(inst))
    for n in sweep_order(len(devil_cores)):
        for ranked in rankings:
            chosen = frozenset(ranked[:n])
            if chosen in tried:
                continue
            tried.add(chosen)
            if guard is not None and guard.expired:
                return
            a = isolating(inst, chosen, near)
            if a is not None:
                yield a
