"""A job's stray containers traded into the rack it talks to (placement/fragments.py)."""

from __future__ import annotations

import time
from typing import Any

from conftest import container, host, instance
from test_gather import never_worse, realistic_starts

from clavis.instance import Instance
from clavis.objectives import Weights, bounds, evaluate, host_loads
from clavis.placement.exchange import exchange
from clavis.placement.fragments import gather_fragments

MB = 1e6


def _ring_with_a_stray_pair(cross_rack: float = 4.0) -> Instance:
    """Racks r1 (h0, h1) and r2 (h2, h3) of 8-core hosts. A ring of six 2-core turtles,
    r0..r5, and a silent job of four, s0..s3."""
    hosts = [host(f"h{i}", "r1" if i < 2 else "r2") for i in range(4)]
    ring = [f"r{i}" for i in range(6)]
    flows = [{"src": a, "dst": ring[(i + 1) % 6], "bytes_per_s": MB} for i, a in enumerate(ring)]
    jobs: list[dict[str, Any]] = [
        {"name": "ring", "containers": [container(c) for c in ring], "traffic": flows},
        {"name": "silent", "containers": [container(f"s{i}") for i in range(4)]},
    ]
    return instance(hosts, jobs, links={"same_rack": 1.0, "cross_rack": cross_rack})


# r0..r3 fill h0, r4 and r5 sit on h2 in the other rack; s0 and s1 on h1, s2 on h2, s3 on h3
STRAY = (0, 0, 0, 0, 2, 2, 1, 1, 2, 3)


def _k(inst: Instance, w: Weights) -> tuple[float, float, float, float]:
    return bounds(inst).linear(w)[0]


def test_a_stray_pair_trades_places_with_silent_containers_of_its_main_rack() -> None:
    inst = _ring_with_a_stray_pair()
    w = Weights(1, 1, 1)
    k = _k(inst, w)
    # r3-r4 and r5-r0 cross racks (cost 4 each); no one swap pays: r4 alone on h1 saves
    # 3 on r3-r4 and pays 4 on r4-r5
    assert 2 * MB * inst.cross_rack_cost == evaluate(inst, STRAY).C
    assert exchange(inst, STRAY, k=k, deadline=time.monotonic() + 5) == STRAY
    after = gather_fragments(inst, STRAY, k=k, deadline=time.monotonic() + 5)
    rack = [h.rack for h in inst.hosts]
    assert {rack[h] for h in after[:6]} == {rack[0]}, after
    assert 2 * MB * inst.same_rack_cost == evaluate(inst, after).C
    # the silent containers took the ring's places: every host keeps its load, P stays
    assert host_loads(inst, after) == host_loads(inst, STRAY)
    assert evaluate(inst, after).P == evaluate(inst, STRAY).P
    assert never_worse(inst, w, STRAY, after)


def test_nothing_is_traded_when_the_racks_cost_alike_or_the_deadline_has_passed() -> None:
    inst = _ring_with_a_stray_pair()
    k = _k(inst, Weights(1, 1, 1))
    assert gather_fragments(inst, STRAY, k=k, deadline=time.monotonic() - 1) == STRAY
    flat = _ring_with_a_stray_pair(cross_rack=1.0)
    assert gather_fragments(flat, STRAY, k=k, deadline=time.monotonic() + 5) == STRAY


def test_on_realistic_starts_it_never_raises_f_and_keeps_every_hosts_load() -> None:
    lowered = 0
    for inst, starts in realistic_starts():
        for w in (Weights(1, 1, 1, 1), Weights(2, 3, 4, 0), Weights(6, 5, 7, 9)):
            k = _k(inst, w)
            for start in starts:
                after = gather_fragments(inst, start, k=k, deadline=time.monotonic() + 10)
                lowered += never_worse(inst, w, start, after)
                # swaps of containers of equal cores: each host keeps its load
                assert host_loads(inst, after) == host_loads(inst, start)
    assert lowered >= 10, lowered
