"""Whole jobs moved onto hosts of their own (placement/gather.py)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

from clavis.instance import Assignment, Instance, build_instance
from clavis.model import Cluster, Placement, Workload
from clavis.objectives import Weights, bounds, evaluate, score, straggling_jobs, violations
from clavis.placement.baselines import random_assignment
from clavis.placement.exchange import exchange
from clavis.placement.gather import gather
from clavis.realistic import RealisticSpec, generate


def four_hosts() -> Cluster:
    """Four hosts of 8 cores in one rack, 2 domains (tolerance 2 devil cores)."""
    return Cluster.model_validate(
        {
            "schema_version": 1,
            "hosts": [
                {
                    "name": f"h{i}",
                    "rack": "r0",
                    "cores": 8,
                    "domains": {"count": 2, "cores_per_domain": 4},
                    "power": {"idle_w": 100, "peak_w": 180, "off_w": 10},
                }
                for i in range(4)
            ],
        }
    )


def _split_ring() -> Instance:
    """Four hosts of 8 cores (tolerance 2 devil cores); a ring of four 2-core containers,
    devil, turtle, devil, turtle, and a job of two 2-core devils without traffic."""
    cluster = four_hosts()
    ring = [f"ring-c{i}" for i in range(4)]
    workload = Workload.model_validate(
        {
            "schema_version": 1,
            "jobs": [
                {
                    "name": "ring",
                    "containers": [
                        {
                            "name": n,
                            "cores": 2,
                            "memory_bytes": 1 << 30,
                            "intensity_mpki": 10.0 if i % 2 == 0 else 1.0,
                        }
                        for i, n in enumerate(ring)
                    ],
                    "traffic": [
                        {"src": ring[i], "dst": ring[(i + 1) % 4], "bytes_per_s": 1e6}
                        for i in range(4)
                    ],
                },
                {
                    "name": "other",
                    "containers": [
                        {"name": f"other-c{i}", "cores": 2, "memory_bytes": 1 << 30,
                         "intensity_mpki": 10.0}
                        for i in range(2)
                    ],
                },
            ],
        }
    )  # fmt: skip
    return build_instance(cluster, workload)


def _ring_and_fill(n: int, fill: list[int]) -> Workload:
    """A ring of n 2-core turtles c0..c(n-1), 1 MB/s between neighbours, and a job of
    turtles f0, f1, ... of the cores given, without traffic."""
    ring = [f"c{i}" for i in range(n)]
    return Workload.model_validate(
        {
            "schema_version": 1,
            "jobs": [
                {
                    "name": "ring",
                    "containers": [
                        {"name": c, "cores": 2, "memory_bytes": 1 << 30, "intensity_mpki": 1.0}
                        for c in ring
                    ],
                    "traffic": [
                        {"src": ring[i], "dst": ring[(i + 1) % n], "bytes_per_s": 1e6}
                        for i in range(n)
                    ],
                },
                {
                    "name": "fill",
                    "containers": [
                        {"name": f"f{i}", "cores": c, "memory_bytes": 1 << 30,
                         "intensity_mpki": 1.0}
                        for i, c in enumerate(fill)
                    ],
                },
            ],
        }
    )  # fmt: skip


def never_worse(inst: Instance, w: Weights, placed: Assignment, after: Assignment) -> bool:
    """Asserts that ``after`` keeps every constraint and has no higher F than ``placed``;
    whether F went down."""
    assert not violations(inst, after)
    limits = bounds(inst)
    before_f, after_f = score(inst, placed, w, limits).F, score(inst, after, w, limits).F
    assert after_f <= before_f + 1e-12, (before_f, after_f)
    return after_f < before_f - 1e-9


def realistic_starts() -> Iterator[tuple[Instance, list[Assignment]]]:
    """Realistic snapshots of 96 hosts (every other one with a current placement and
    drained hosts) and placements to start from: a random one, and the current one."""
    for seed in range(6):
        cluster, workload, current = generate(
            RealisticSpec(hosts=96, seed=seed, current=seed % 2 == 1)
        ).models()
        inst = build_instance(cluster, workload, current)
        start = random_assignment(inst, random.Random(seed))
        assert start is not None
        # A repack starts where the containers are, drained hosts' residents included.
        here = tuple(hi for hi in inst.current if hi is not None)
        yield inst, [start, here] if len(here) == len(inst.containers) else [start]


# The ring's devils contend on h0 beside the other job's, its turtles sit on h1: every
# flow of the ring crosses hosts, and no single container can join its neighbours (h0
# is full) without leaving a flow behind.
SPLIT = (0, 1, 0, 1, 0, 0)


def test_a_lagging_job_split_from_its_turtles_moves_whole_onto_a_host_of_its_own() -> None:
    inst = _split_ring()
    assert evaluate(inst, SPLIT).C == 4 * 1e6
    assert straggling_jobs(inst, SPLIT) == {0, 1}
    # Contention not weighted: the ring goes whole onto h1 (it ran there alone, so no
    # host more is switched on) and lags there as before; nothing crosses hosts.
    w = Weights(1, 0, 1)
    k, _ = bounds(inst).linear(w)
    after = gather(inst, SPLIT, k=k, deadline=time.monotonic() + 5)
    assert not violations(inst, after)
    assert after == (1, 1, 1, 1, 0, 0)
    assert evaluate(inst, after).C == 0
    assert evaluate(inst, after).P == evaluate(inst, SPLIT).P


def test_when_contention_weighs_most_the_job_is_laid_calm_and_stops_lagging() -> None:
    inst = _split_ring()
    w = Weights(1, 10, 1)
    k, _ = bounds(inst).linear(w)
    after = gather(inst, SPLIT, k=k, deadline=time.monotonic() + 5)
    assert not violations(inst, after)
    # One devil per host, each with its ring neighbour: two flows cross, one more host.
    assert straggling_jobs(inst, after) == {1}
    assert evaluate(inst, after).C == 2 * 1e6
    assert len({after[ci] for ci in range(4)}) == 2
    assert score(inst, after, w).F < score(inst, SPLIT, w).F


def test_a_job_that_pays_nothing_for_traffic_is_left_where_it_is() -> None:
    inst = _split_ring()
    k, _ = bounds(inst).linear(Weights(1, 1, 0))
    assert gather(inst, SPLIT, k=k, deadline=time.monotonic() + 5) == SPLIT


def test_gathering_never_raises_f_and_keeps_every_constraint() -> None:
    lowered = 0
    for inst, starts in realistic_starts():
        for w in (Weights(6, 10, 4, 1), Weights(1, 1, 10, 1)):
            limits = bounds(inst)
            k, _ = limits.linear(w)
            # From a random placement, the current one and one improved by exchanges.
            exchanged = exchange(inst, starts[0], k=k, deadline=time.monotonic() + 5)
            for placed in (*starts, exchanged):
                after = gather(inst, placed, k=k, deadline=time.monotonic() + 5)
                lowered += never_worse(inst, w, placed, after)
    assert lowered >= 12, lowered  # not vacuous: whole jobs do move (18 of 24)


def test_a_scattered_ring_is_laid_again_on_the_places_it_holds() -> None:
    # Six 2-core turtles in a ring, every other one on h0 and h1, each beside a 2-core
    # container of another job; h2 and h3 are full: all six flows cross. No host is
    # empty or the ring's alone, so the job keeps its places (P, D and every host's load
    # unchanged) and only the order changes: two flows cross.
    workload = _ring_and_fill(6, [2, 2, 8, 8])
    inst = build_instance(four_hosts(), workload)
    scattered = (0, 1, 0, 1, 0, 1, 0, 1, 2, 3)
    k, _ = bounds(inst).linear(Weights(1, 1, 1))
    after = gather(inst, scattered, k=k, deadline=time.monotonic() + 5)
    assert not violations(inst, after)
    assert evaluate(inst, scattered).C == 6 * 1e6
    assert evaluate(inst, after).C == 2 * 1e6
    assert sorted(after[:6]) == sorted(scattered[:6]) and after[6:] == scattered[6:]


def test_what_a_job_runs_on_a_drained_host_stays_there() -> None:
    # A ring of six 2-core turtles: three on drained h0 (where they run now), three on
    # h1; h2 and h3 are full. Laid again in place, a neighbour from h1 would take a
    # place on h0, which takes no new container: those three stay where they are.
    raw = four_hosts().model_dump(mode="json")
    raw["hosts"][0]["state"] = "drain"
    workload = _ring_and_fill(6, [8, 8])
    here = (0, 1, 0, 1, 0, 1, 2, 3)
    names = [f"h{i}" for i in range(4)]
    containers = [f"c{i}" for i in range(6)] + ["f0", "f1"]
    current = Placement(assignment={c: names[h] for c, h in zip(containers, here, strict=True)})
    inst = build_instance(Cluster.model_validate(raw), workload, current)
    k, _ = bounds(inst).linear(Weights(1, 1, 10, 0))
    after = gather(inst, here, k=k, deadline=time.monotonic() + 5)
    assert not violations(inst, after)
    assert [after[ci] for ci in (0, 2, 4)] == [0, 0, 0]
