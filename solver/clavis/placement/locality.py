"""An order of each job's containers that keeps talking containers next to each other.

The greedy schedules (fathom.py) and CoreRR fill hosts with a job's containers in the
order they are listed. For all-to-all traffic any order is as good, but for a 2-D stencil
listed row by row a host filled with k consecutive ranks holds a strip one row high, and
nearly every vertical flow crosses hosts: on a realistic snapshot of 1,024 hosts two
stencil jobs made half the slow-link traffic of the best greedy schedule (issue 12).

``order`` grows the job's traffic graph region by region instead (graph growing, as in
the greedy initial partitioning of multilevel partitioners): start from a container of
least degree (a corner or an end), and keep taking the container with the most traffic
into the current region, ties to the one with the most traffic into everything taken
so far; after ``region`` containers start a new region, next to the old ones. A stencil
then fills hosts in compact blocks and a ring or a chain in runs; jobs without listed
flows keep their order.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Sequence

from clavis.instance import Instance


def order(inst: Instance, host_cores: int) -> list[int]:
    """A sort key per container: a job's containers sorted by it come in region-growing
    order, a region being what a host of ``host_cores`` cores holds of the job."""
    nbrs = neighbours(inst)
    key = list(range(len(inst.containers)))
    for members in inst.job_containers:
        if len(members) <= 2 or not any(m in nbrs for m in members):
            continue
        sizes = sorted(inst.containers[m].cores for m in members)
        region = max(1, host_cores // sizes[len(sizes) // 2])
        slots = sorted(members)
        # The k-th container grown takes the k-th listed slot of its job.
        for slot, m in zip(slots, grown(slots, nbrs, [region]), strict=True):
            key[m] = slot
    return key


def neighbours(inst: Instance) -> dict[int, list[tuple[int, float]]]:
    """Per container, its listed flows' other ends and bytes/s."""
    nbrs: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for f in inst.flows:
        nbrs[f.a].append((f.b, f.bytes_per_s))
        nbrs[f.b].append((f.a, f.bytes_per_s))
    return nbrs


def grown(
    members: list[int], nbrs: dict[int, list[tuple[int, float]]], sizes: Sequence[int]
) -> list[int]:
    """The members in region-growing order (module docstring), regions of the given
    sizes one after the other, the last size repeating: the places a job holds, filled
    in this order, get regions of their own sizes. Ties in traffic go to the container
    nearest the region's first (hops inside the region): on a grid, equal gains would
    otherwise follow the listing and grow a strip, not a block."""
    sizes = [max(1, n) for n in sizes] or [1]
    ends = set(itertools.accumulate(sizes))
    last, step = max(ends), sizes[-1]
    inside = set(members)
    degree = {m: sum(w for v, w in nbrs.get(m, ()) if v in inside) for m in members}
    starts = sorted(members, key=lambda m: (degree[m], m))  # least degree first
    gain: dict[int, float] = defaultdict(float)  # traffic into the current region
    touch: dict[int, float] = defaultdict(float)  # traffic into everything taken
    hops: dict[int, int] = {}  # hops from the region's first container, through it
    taken: set[int] = set()
    heap: list[tuple[float, int, float, int, int]] = []
    out: list[int] = []
    epoch = 0  # regions started so far: heap entries of an older region are stale
    next_start = 0
    far = len(members)  # hops of a container not next to the region
    while len(out) < len(members):
        pick = None
        while heap:
            g, d, t, m, e = heapq.heappop(heap)
            fresh = e == epoch and -g == gain[m] and d == hops.get(m, far) and -t == touch[m]
            if m not in taken and fresh:
                pick = m
                break
        if pick is None:  # a new component: its least-degree member
            while starts[next_start] in taken:
                next_start += 1
            pick = starts[next_start]
        taken.add(pick)
        out.append(pick)
        here = hops.get(pick, 0)
        if len(out) in ends or (len(out) > last and (len(out) - last) % step == 0):
            # a new region, next to what is taken
            epoch += 1
            gain.clear()
            hops.clear()
            heap = [(0.0, far, -touch[m], m, epoch) for m in touch if m not in taken]
            heapq.heapify(heap)
            here = -1  # the next pick starts the region: its neighbours are not in it
        elif pick not in hops:
            hops[pick] = here = 0  # the region's first container
        for v, w in nbrs.get(pick, ()):
            if v in inside and v not in taken:
                touch[v] += w
                if here >= 0:
                    gain[v] += w
                    hops[v] = min(hops.get(v, far), here + 1)
                heapq.heappush(heap, (-gain[v], hops.get(v, far), -touch[v], v, epoch))
    return out
