"""A ring or grid set dealt anew over the places it holds (placement/relayout.py)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from conftest import container, host, instance
from test_gather import never_worse, realistic_starts

from clavis.instance import Assignment, Instance
from clavis.objectives import Weights, bounds, evaluate
from clavis.placement import relayout
from clavis.realistic import ring_edges, stencil_edges

MB = 1e6


def _ring(
    n: int,
    devils: frozenset[int] = frozenset(),
    current: dict[str, str] | None = None,
    drained: str | None = None,
) -> Instance:
    """n 1-core containers in a ring (both ways, 1 MB/s each) on four 4-core hosts, two
    racks of two."""
    names = [f"c{k:02d}" for k in range(n)]
    job: dict[str, Any] = {
        "name": "ring",
        "containers": [
            container(nm, cores=1, mpki=20 if k in devils else 1) for k, nm in enumerate(names)
        ],
        "traffic": [
            {"src": names[a], "dst": names[b], "bytes_per_s": MB} for a, b in ring_edges(n)
        ],
    }
    hosts = [host(f"h{i}", "r1" if i < 2 else "r2", cores=4) for i in range(4)]
    for h in hosts:
        if h["name"] == drained:
            h["state"] = "drain"
    return instance(hosts, [job], current)


def _run(inst: Instance, placed: Assignment, w: Weights) -> Assignment:
    k, _ = bounds(inst).linear(w)
    return relayout.improve(inst, placed, k_c=k[2], k_m=k[3], deadline=time.monotonic() + 5)


def _per_host(inst: Instance, placed: Assignment) -> Counter[tuple[int, bool]]:
    return Counter((h, inst.containers[c].devil) for c, h in enumerate(placed))


SCATTERED = tuple(k % 4 for k in range(16))  # neighbours always on different hosts


def test_a_scattered_ring_is_dealt_in_arcs_one_rack_at_a_time() -> None:
    # 16 containers, each host 4 of them: every one of the 16 ring pairs crossed hosts
    # and 8 crossed racks. Dealt round the ring, each host holds an arc: 4 pairs cross
    # hosts, 2 of them racks, the least any layout on these hosts can do.
    inst = _ring(16)
    after = _run(inst, SCATTERED, Weights(1, 1, 1))
    same, cross = inst.same_rack_cost, inst.cross_rack_cost
    before_c, after_c = evaluate(inst, SCATTERED).C, evaluate(inst, after).C
    assert before_c == 2 * MB * (8 * same + 8 * cross)
    assert after_c == 2 * MB * (2 * same + 2 * cross)
    assert _per_host(inst, after) == _per_host(inst, SCATTERED)
    assert never_worse(inst, Weights(1, 1, 1), SCATTERED, after)


def test_devils_keep_the_hosts_they_had() -> None:
    # Devils at every fourth place of the ring, all four on h0 (contended): dealt anew,
    # h0 still holds the four devils and each host its count, so P and D stay, and the
    # ring crosses less though the devils' places split its arcs.
    inst = _ring(16, devils=frozenset({0, 4, 8, 12}))
    before_o = evaluate(inst, SCATTERED)
    after = _run(inst, SCATTERED, Weights(1, 1, 1))
    after_o = evaluate(inst, after)
    assert _per_host(inst, after) == _per_host(inst, SCATTERED)
    assert (after_o.P, after_o.D) == (before_o.P, before_o.D)
    assert after_o.C < before_o.C


def test_moving_costs_more_than_the_traffic_saved_so_nothing_moves() -> None:
    # Running where they are now: moving 12 of them (1 GiB each) at M's weight 10 costs
    # more than the crossing traffic saves at C's weight 1.
    current = {f"c{k:02d}": f"h{k % 4}" for k in range(16)}
    inst = _ring(16, current=current)
    assert _run(inst, SCATTERED, Weights(1, 1, 1, 10)) == SCATTERED
    moved = _run(inst, SCATTERED, Weights(1, 1, 100, 0.001))
    assert moved != SCATTERED
    assert evaluate(inst, moved).C < evaluate(inst, SCATTERED).C


def test_a_container_on_a_drained_host_stays_and_no_other_goes_there() -> None:
    # h0 is drained and keeps c00, c04, c08 and c12, its own: dealt anew, the ring's
    # arcs may not bring any other container onto it (a drained host takes none), so
    # they stay and the twelve others, scattered, are dealt over h1-h3 among themselves.
    current = {f"c{k:02d}": f"h{k % 4}" for k in range(16)}
    inst = _ring(16, current=current, drained="h0")
    placed = tuple(0 if k % 4 == 0 else 1 + k % 3 for k in range(16))
    after = _run(inst, placed, Weights(1, 1, 100, 0.001))
    assert after != placed  # the other hosts were dealt anew
    assert [c for c, h in enumerate(after) if h == 0] == [0, 4, 8, 12]
    assert never_worse(inst, Weights(1, 1, 100, 0.001), placed, after)


def test_on_realistic_starts_f_never_rises_and_p_and_d_stay() -> None:
    gains = 0
    for inst, starts in realistic_starts():
        w = Weights(2, 3, 4, 1) if inst.has_current else Weights(2, 3, 4)
        for placed in starts:
            after = _run(inst, placed, w)
            gains += never_worse(inst, w, placed, after)
            before_o, after_o = evaluate(inst, placed), evaluate(inst, after)
            assert (after_o.P, after_o.D) == (before_o.P, before_o.D)
    assert gains >= 3


def _stencil_on_hosts_of(rows: int, cols: int, per_host: int) -> tuple[Instance, Assignment]:
    """A rows x cols 5-point stencil of 1-core turtles (1 MB/s a pair) on hosts of
    ``per_host`` cores, one rack, dealt in rank order (each host a run of a grid row)."""
    n = rows * cols
    names = [f"c{k:03d}" for k in range(n)]
    flows = [
        {"src": names[a], "dst": names[b], "bytes_per_s": MB}
        for a, b in stencil_edges(n)
        if a < b  # one flow a pair
    ]
    job: dict[str, Any] = {
        "name": "stencil",
        "containers": [container(nm, cores=1, mpki=1) for nm in names],
        "traffic": flows,
    }
    hosts = [host(f"h{i:02d}", "r1", cores=per_host) for i in range(-(-n // per_host))]
    inst = instance(hosts, [job])
    return inst, tuple(k // per_host for k in range(n))


def test_a_stencil_on_hosts_of_twelve_is_dealt_in_bands_of_blocks() -> None:
    # 16 x 32 cells, 12 a host: Morton runs of 12 are L-shapes (and rank order is runs
    # of rows); bands four cells wide deal 4 x 3 blocks (the 1,024-host bench's seed 1
    # has such a stencil of 2-core turtles beside calm devils). Each block keeps at most 17 of
    # its pairs (shapes.lattice_most), so 43 hosts cut at least 976 - 43 * 17 = 245.
    inst, placed = _stencil_on_hosts_of(16, 32, 12)
    shape = relayout.components(inst)[0].shape
    assert shape is not None and shape.kind == "grid"
    orders = shape.orders()
    assert len(orders) > 1
    assert all(sorted(order) == list(range(16 * 32)) for order in orders)

    def cut(layout: Assignment) -> int:
        return round(evaluate(inst, layout).C / (MB * inst.same_rack_cost))

    by_morton = list(placed)
    for c, h in relayout.deal(inst, relayout.components(inst)[0], list(placed)).items():
        by_morton[c] = h
    after = _run(inst, placed, Weights(0, 0, 1))
    # Rank order cuts 517 pairs, Morton order 336, bands 254.
    assert cut(placed) > cut(tuple(by_morton)) > cut(after) + 60
    assert 245 <= cut(after) <= 260
    assert _per_host(inst, after) == _per_host(inst, placed)
