"""The C floor of talking jobs that share the hosts' sizes (placement/capacity.py)."""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

from conftest import container, host, instance

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, evaluate
from clavis.placement import capacity, lower, pool
from clavis.realistic import ring_edges

MB = 1e6


def _two_rings() -> Instance:
    """Two rings of eight 1-core containers (1 MB/s a pair, one way), one rack: one
    8-core host and three 4-core hosts."""
    jobs: list[dict[str, Any]] = []
    for name in ("a", "b"):
        names = [f"{name}{k}" for k in range(8)]
        jobs.append(
            {
                "name": name,
                "containers": [container(nm, cores=1, mpki=1) for nm in names],
                "traffic": [
                    {"src": names[x], "dst": names[y], "bytes_per_s": MB}
                    for x, y in ring_edges(8)
                    if x < y
                ],
            }
        )
    hosts = [host("big", "r1", cores=8)] + [host(f"h{i}", "r1", cores=4) for i in range(3)]
    return instance(hosts, jobs)


def test_two_rings_and_one_host_that_holds_a_ring_whole() -> None:
    # Each ring's own floor gives it the 8-core host: nothing cut. Only one ring fits
    # there; the other is split over 4-core hosts and cuts two pairs, which is the least.
    inst = _two_rings()
    floor = lower.traffic_floor_by_job(inst)
    assert sum(floor.values()) == 0.0
    got = capacity.capacity_floor(inst, set(range(len(inst.job_containers))))
    assert 2 * MB * inst.same_rack_cost * (1 - 1e-6) <= got <= 2 * MB * inst.same_rack_cost
    # The pool bound counts it: above the bound without it, and the pool's C term has it.
    w = Weights(0, 0, 1)
    limits = bounds(inst)
    pb = pool.prepare(inst, w, limits)
    assert pb is not None and pb.stay is not None and pb.stay.shared >= 0
    answer = pool.solve(pb, time.monotonic() + 5)
    (_, _, k_c, _), _ = limits.linear(w)
    assert answer.bound >= k_c * 2 * MB * inst.same_rack_cost - 1e-6
    best = min(evaluate(inst, a).C for a in _split_placements(inst))
    assert best == 2 * MB * inst.same_rack_cost


def _split_placements(inst: Instance) -> list[Assignment]:
    """Ring a whole on the 8-core host, ring b in two halves, and the other way round."""
    a, b = inst.job_containers
    out = []
    for whole, split in ((a, b), (b, a)):
        place = [0] * len(inst.containers)
        for k, ci in enumerate(split):
            place[ci] = 1 + k // 4
        for ci in whole:
            place[ci] = 0
        out.append(tuple(place))
    return out


def _c_of(inst: Instance, jobs: set[int], placed: Assignment) -> float:
    """The C that these jobs' flows and all-to-all entries send (objectives.traffic's
    costs)."""
    racks = [h.rack for h in inst.hosts]

    def cost(x: int, y: int) -> float:
        if x == y:
            return 0.0
        return inst.same_rack_cost if racks[x] == racks[y] else inst.cross_rack_cost

    total = 0.0
    for f in inst.flows:
        if inst.containers[f.a].job in jobs:
            total += f.bytes_per_s * cost(placed[f.a], placed[f.b])
    for u in inst.uniform:
        if inst.containers[u.members[0]].job in jobs:
            members = u.members
            for i, x in enumerate(members):
                for y in members[i + 1 :]:
                    total += u.bytes_per_s * cost(placed[x], placed[y])
    return total


def _scarce(rng: random.Random) -> Instance:
    """One host of 4 or 6 cores, two or three of 2, one or two racks, and two talking
    jobs of 3-4 1-core containers (all-to-all or a ring): the large host holds one job
    whole at most."""
    racks = rng.randint(1, 2)
    sizes = [rng.choice([4, 6])] + [2] * rng.randint(2, 3)
    hosts = [host(f"h{i}", f"r{i % racks}", cores=c) for i, c in enumerate(sizes)]
    jobs: list[dict[str, Any]] = []
    for name in ("a", "b"):
        n = rng.randint(3, 4 if name == "a" else 3)
        names = [f"{name}{k}" for k in range(n)]
        rate = MB * rng.uniform(1, 10)
        job: dict[str, Any] = {
            "name": name,
            "containers": [container(nm, cores=1, mpki=rng.choice([1, 20])) for nm in names],
        }
        if rng.random() < 0.5:
            job["all_to_all_bytes_per_s"] = rate
        else:
            job["traffic"] = [
                {"src": names[x], "dst": names[y], "bytes_per_s": rate}
                for x, y in ring_edges(n)
                if x < y
            ]
        jobs.append(job)
    return instance(hosts, jobs)


def _every_placement(inst: Instance) -> list[Assignment]:
    cores = [c.cores for c in inst.containers]
    room = [h.cores for h in inst.hosts]
    out = []
    for placed in itertools.product(range(len(room)), repeat=len(cores)):
        load = [0] * len(room)
        for c, h in zip(cores, placed, strict=True):
            load[h] += c
        if all(x <= r for x, r in zip(load, room, strict=True)):
            out.append(placed)
    return out


def test_the_capacity_floor_never_exceeds_the_least_c_enumerated() -> None:
    # Over both jobs together and over each alone (the pool bound counts the jobs
    # outside its Stay rows only), and never below their own floors.
    checked = raised = 0
    for seed in range(40):
        inst = _scarce(random.Random(seed))
        placements = _every_placement(inst)
        floor = lower.traffic_floor_by_job(inst)
        for jobs in ({0, 1}, {0}, {1}):
            got = capacity.capacity_floor(inst, jobs)
            best = min(_c_of(inst, jobs, a) for a in placements)
            assert got <= best + 1e-9 * max(1.0, best), (seed, jobs, got, best)
            assert got >= sum(floor.get(j, 0.0) for j in jobs) * (1 - 1e-6)
        raised += capacity.capacity_floor(inst, {0, 1}) > sum(floor.values()) * (1 + 1e-6)
        checked += 1
    assert raised > 5, (checked, raised)
