"""Placement methods: optimality against exact enumeration, symmetry, warm start, baselines."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from conftest import container, host, instance

from clavis.documents import load_cluster, load_workload
from clavis.instance import build_instance
from clavis.model import Placement
from clavis.objectives import Weights, bounds, evaluate, score, violations
from clavis.placement import SolveOptions, calming, fathom, place
from clavis.placement.baselines import corerr
from clavis.placement.cpsat import build_model, canonical, decode
from clavis.placement.exact import TooLargeError, feasible_assignments
from clavis.placement.result import Progress, Stopwatch
from clavis.placement.symmetry import container_groups, host_types
from clavis.realistic import RealisticSpec, generate, stencil_edges
from clavis.synthetic import enumerable_instance, small_instance, table53_instance

OPTS = SolveOptions(time_limit=20, seed=1, workers=2)


def _weights(rng: random.Random) -> Weights:
    return Weights(*(float(rng.randint(0, 10)) for _ in range(3)), float(rng.randint(0, 3))
                   ) if rng.random() < 0.9 else Weights(1, 1, 1, 1)  # fmt: skip


@pytest.mark.parametrize("seed", range(30))
def test_cpsat_and_plain_match_exact_enumeration(seed: int) -> None:
    rng = random.Random(seed)
    cluster, workload, current = small_instance(rng)
    inst = build_instance(cluster, workload, Placement(assignment=current) if current else None)
    try:
        w = _weights(rng)
    except ValueError:
        w = Weights(1, 1, 1)
    oracle = place("exact", inst, w, OPTS)
    for method in ("cpsat", "plain"):
        got = place(method, inst, w, OPTS)
        if oracle.status == "INFEASIBLE":
            assert got.status == "INFEASIBLE"
            continue
        assert got.status == "OPTIMAL", method
        assert got.assignment is not None and got.score is not None and oracle.score is not None
        assert violations(inst, got.assignment) == []
        assert pytest.approx(oracle.score.F, abs=1e-6) == got.score.F, method
        # The proven bound is the model's F at the optimum: the model and evaluator agree.
        assert got.bound == pytest.approx(got.score.F, abs=1e-6)
        assert got.gap == pytest.approx(0.0, abs=1e-6)


def test_all_to_all_job_is_one_group_and_ring_is_singletons() -> None:
    names = [f"a{i}" for i in range(4)]
    a2a = [{"src": x, "dst": y, "bytes_per_s": 5.0} for x in names for y in names if x != y]
    ring = [{"src": names[i], "dst": names[(i + 1) % 4], "bytes_per_s": 5.0} for i in range(4)]
    mixed = [container("d0", mpki=9), container("d1", mpki=9), container("t0"), container("t1")]
    for traffic, sizes in [(a2a, [4]), (ring, [1, 1, 1, 1]), ([], [4])]:
        inst = instance([host("h")] * 1, [{"name": "j", "containers": [container(n) for n in names],
                                             "traffic": traffic}])  # fmt: skip
        assert sorted(g.size for g in container_groups(inst)) == sizes
    inst = instance([host("h")], [{"name": "j", "containers": mixed}])
    groups = container_groups(inst)
    assert sorted((g.devil, g.size) for g in groups) == [(False, 2), (True, 2)]
    assert [g.size for g in container_groups(inst, aggregate=False)] == [1, 1, 1, 1]


def test_host_types_split_by_rack_spec_and_current_residents() -> None:
    hosts = [host("a", "r1"), host("b", "r1"), host("c", "r1"), host("d", "r2"),
             host("e", "r1", cores=4)]  # fmt: skip
    jobs = [{"name": "j", "containers": [container("x")]}]
    assert sorted(map(sorted, host_types(instance(hosts, jobs), []))) == [[0, 1, 2], [3], [4]]
    inst = instance(hosts, jobs, current={"x": "b"})
    types = host_types(inst, container_groups(inst))
    assert sorted(map(sorted, types)) == [[0, 2], [1], [3], [4]]


def test_symmetric_model_has_far_fewer_decisions_than_plain() -> None:
    cluster, workload = table53_instance(seed=4, jobs=4, max_containers=12)
    inst = build_instance(cluster, workload)
    w = Weights(1, 1, 1)
    _, sym = build_model(inst, w, symmetric=True)
    _, plain = build_model(inst, w, symmetric=False)
    assert len(sym.groups) <= 2 * len(inst.jobs)
    assert len(plain.y) == len(inst.containers) * len(inst.hosts)
    assert len(sym.y) * 3 < len(plain.y)


def test_heavy_migration_weight_keeps_the_current_placement() -> None:
    rng = random.Random(7)
    hosts = [host(f"h{i}", f"r{i % 2}") for i in range(4)]
    jobs = [{"name": f"j{k}", "containers": [container(f"j{k}c{i}", mpki=rng.choice([1, 9]))
                                             for i in range(2)]} for k in range(4)]  # fmt: skip
    current = {f"j{k}c{i}": f"h{(k + i) % 4}" for k in range(4) for i in range(2)}
    inst = instance(hosts, jobs, current=current)
    stay = place("cpsat", inst, Weights(0.001, 0.001, 0.001, 1), OPTS)
    assert stay.score is not None and stay.score.raw.M == 0
    moved = place("cpsat", inst, Weights(1, 0, 0, 0), OPTS)
    assert moved.score is not None and moved.score.raw.M > 0  # packing needs moves
    assert moved.score.raw.P < stay.score.raw.P


def test_a_start_that_meets_the_floor_is_returned_at_once_as_optimal() -> None:
    # Weights on M alone: staying put costs nothing and nothing can cost less, so the
    # answer is the current placement, proven, without spending the limit (it once took
    # 4.8 s of a 5 s limit at 529 hosts, 28 s of 30 here).
    cluster, workload, current = generate(RealisticSpec(hosts=400, seed=3, current=True)).models()
    inst = build_instance(cluster, workload, current)
    opts = SolveOptions(time_limit=30, seed=0, hint=inst.current)  # type: ignore[arg-type]
    got = place("cpsat", inst, Weights(0, 0, 0, 1), opts)
    assert got.status == "OPTIMAL" and got.score is not None and got.bound is not None
    assert got.score.raw.M == 0 and got.bound >= got.score.F - 1e-9
    assert list(got.assignment or []) == list(inst.current)
    assert got.seconds < 10  # far inside the limit: no search ran


def test_decode_keeps_group_members_where_they_are() -> None:
    hosts = [host("h0"), host("h1")]
    jobs = [{"name": "j", "containers": [container(f"c{i}") for i in range(3)]}]
    inst = instance(hosts, jobs, current={"c0": "h1", "c1": "h0", "c2": "h1"})
    _, v = build_model(inst, Weights(1, 1, 1))
    assert len(v.groups) == 1
    a = decode(inst, v, {(0, 0): 1, (0, 1): 2})
    assert a == (1, 0, 1)
    assert evaluate(inst, a).M == 0


def test_canonical_hint_is_an_equivalent_relabelling() -> None:
    hosts = [host(f"h{i}") for i in range(3)]
    jobs = [{"name": "j", "containers": [container("a", 6), container("b", 2), container("c", 2)]}]
    inst = instance(hosts, jobs)
    groups = container_groups(inst)
    a = (2, 0, 0)
    c = canonical(inst, groups, a)
    loads = [sum(inst.containers[i].cores for i, h in enumerate(c) if h == k) for k in range(3)]
    assert loads == sorted(loads, reverse=True)
    w = Weights(1, 1, 1)
    assert pytest.approx(score(inst, a, w).F) == score(inst, c, w).F


def test_corerr_packs_and_noderr_spreads(examples: Path) -> None:
    inst = build_instance(load_cluster(examples / "parapluie/cluster.yaml"),
                          load_workload(examples / "parapluie/workload.yaml"))  # fmt: skip
    w = Weights(1, 1, 1)
    core = place("corerr", inst, w, OPTS)
    node = place("noderr", inst, w, OPTS)
    assert core.assignment is not None and node.assignment is not None
    assert core.assignment[:4] == (0, 0, 1, 1)  # block: two 12-core containers per host
    assert node.assignment[:4] == (0, 1, 2, 3)  # half of each host first
    for r in (core, node):
        assert r.assignment is not None and violations(inst, r.assignment) == []


def test_random_search_is_seeded_and_feasible() -> None:
    rng = random.Random(3)
    cluster, workload, _ = small_instance(rng)
    inst = build_instance(cluster, workload)
    w = Weights(1, 1, 1)
    r = place("random", inst, w, SolveOptions(time_limit=0.2, seed=5))
    if r.assignment is not None:
        assert violations(inst, r.assignment) == []
        assert [p.F for p in r.trajectory] == sorted((p.F for p in r.trajectory), reverse=True)


def test_infeasible_is_a_status_not_an_exception() -> None:
    inst = instance(
        [host("h", cores=4, domains=1)],
        [{"name": "j", "containers": [container("a", 3), container("b", 3)]}],
    )
    for method in ("cpsat", "plain", "exact", "corerr", "noderr"):
        r = place(method, inst, Weights(1, 1, 1), OPTS)
        assert r.status == "INFEASIBLE" and r.assignment is None, method


def test_exact_refuses_large_instances() -> None:
    inst = instance(
        [host(f"h{i}") for i in range(10)],
        [{"name": "j", "containers": [container(f"c{i}", 1) for i in range(10)]}],
    )
    with pytest.raises(TooLargeError, match="above the exact limit"):
        feasible_assignments(inst)


def test_unknown_method() -> None:
    inst = instance([host("h")], [{"name": "j", "containers": [container("a")]}])
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        place("magic", inst, Weights(1, 1, 1), OPTS)


def test_drained_and_down_hosts() -> None:
    hosts = [host("up1"), {**host("dr"), "state": "drain"}, {**host("dn"), "state": "down"}]
    jobs = [{"name": "j", "containers": [container("a", 2), container("b", 4), container("c", 2)]}]
    inst = instance(hosts, jobs, current={"a": "dr"})
    # Packing would want everything on one host; only 'a' may stay on the drained one.
    for method in ("cpsat", "plain", "exact"):
        r = place(method, inst, Weights(1, 0, 0, 1), OPTS)
        assert r.assignment is not None, method
        assert r.assignment[0] == 1 and r.assignment[1:] == (0, 0), method
    assert violations(inst, (0, 1, 0)) == ["container 'b' on host 'dr' which is drain"]
    assert violations(inst, (2, 0, 0))[0] == "container 'a' on host 'dn' which is down"
    for method in ("corerr", "noderr"):
        r = place(method, inst, Weights(1, 0, 0, 1), OPTS)
        assert r.assignment is not None and 2 not in r.assignment and 1 not in r.assignment


def test_fathom_isolates_devil_jobs_among_turtles() -> None:
    hosts = [host(f"h{i}", cores=8, domains=2) for i in range(4)]
    jobs = [
        {"name": "D", "containers": [container(f"d{i}", 4, mpki=15) for i in range(2)]},
        {"name": "T", "containers": [container(f"t{i}", 4, mpki=0.5) for i in range(2)]},
    ]
    inst = instance(hosts, jobs)
    packed, isolated = fathom.candidates(inst)
    assert packed == corerr(inst)
    assert evaluate(inst, packed).D == 8  # both devils of D on h0: the job lags
    assert evaluate(inst, isolated).D == 0  # one devil and one turtle per host
    assert violations(inst, isolated) == []
    assert evaluate(inst, isolated).P == evaluate(inst, packed).P  # same hosts powered


def test_fathom_keeps_other_devils_off_an_isolated_devils_host() -> None:
    # A's devil is isolated on h0, which has room left; B's devils (not isolated) go
    # elsewhere, or h0 would be contended and A would lag after all.
    hosts = [host(f"h{i}", cores=8, domains=1) for i in range(3)]
    jobs = [
        {"name": "A", "containers": [container("a0", 4, mpki=15)]},
        {"name": "B", "containers": [container(f"b{i}", 4, mpki=15) for i in range(2)]},
    ]
    inst = instance(hosts, jobs)
    got = fathom.isolating(inst, frozenset({0}))
    assert got is not None and violations(inst, got) == []
    assert got[1] != got[0] and got[2] != got[0]
    assert evaluate(inst, got).D == 8  # B lags (both devils on one host), A does not


def test_fathom_keeps_a_lagging_jobs_turtles_with_its_devils() -> None:
    # A's devil is isolated on h0. R, a ring of devil, turtle, devil, turtle, is not:
    # its devils keep off h0, and so do its turtles, or every ring flow would cross hosts.
    hosts = [host(f"h{i}", cores=8, domains=1) for i in range(3)]
    ring = ["r0", "r1", "r2", "r3"]
    flows = [{"src": ring[k], "dst": ring[(k + 1) % 4], "bytes_per_s": 1.0} for k in range(4)]
    jobs = [
        {"name": "A", "containers": [container("a0", 1, mpki=15)]},
        {
            "name": "R",
            "containers": [
                container(n, 1, mpki=15 if k % 2 == 0 else 0.5) for k, n in enumerate(ring)
            ],
            "traffic": flows,
        },
    ]
    inst = instance(hosts, jobs)
    got = fathom.isolating(inst, frozenset({0}))
    assert got is not None and violations(inst, got) == []
    assert len({got[k] for k in range(1, 5)}) == 1 and got[1] != got[0]
    assert evaluate(inst, got).C == 0.0
    assert evaluate(inst, got).D == 2.0  # R lags (two devils on one host), A does not


def test_calming_moves_a_contended_devil_only_when_f_says_so() -> None:
    # Job A's two 4-core devils share h0 (tolerance 1: contended, A lags); h1 is on and
    # runs a turtle, h2 is empty. Weighing D, one devil moves to h1 (on already, no
    # devil there) and A is calm; weighing P alone, nothing moves (no gain).
    hosts = [host(f"h{i}", cores=8, domains=1) for i in range(3)]
    jobs = [
        {"name": "A", "containers": [container(f"a{i}", 4, mpki=15) for i in range(2)]},
        {"name": "T", "containers": [container("t0", 4)]},
    ]
    inst = instance(hosts, jobs)
    start = (0, 0, 1)
    assert evaluate(inst, start).D == 8
    for w, moved in ((Weights(1, 10, 1), True), (Weights(1, 0, 0), False)):
        limits = bounds(inst)
        got = calming.improve(inst, w, limits, start, deadline=time.monotonic() + 5)
        if not moved:
            assert got is None
            continue
        assert got is not None and violations(inst, got) == []
        assert evaluate(inst, got).D == 0
        assert sorted(got[:2]) == [0, 1] and got[2] == 1  # onto h1, h2 stays off
        assert score(inst, got, w, limits).F < score(inst, start, w, limits).F


def test_calming_swaps_a_devil_with_a_turtle_when_no_host_on_has_room() -> None:
    # Job A's two 4-core devils share h0 (contended); h1 is full of job T's turtles and
    # h2 is off. Moving a devil to h2 would switch it on; swapping it with a turtle of h1
    # calms A with the same hosts on and the same loads, which F prefers when P weighs.
    hosts = [host(f"h{i}", cores=8, domains=1) for i in range(3)]
    jobs = [
        {"name": "A", "containers": [container(f"a{i}", 4, mpki=15) for i in range(2)]},
        {"name": "T", "containers": [container(f"t{i}", 4) for i in range(2)]},
    ]
    inst = instance(hosts, jobs)
    start = (0, 0, 1, 1)
    w = Weights(10, 10, 1)
    limits = bounds(inst)
    got = calming.improve(inst, w, limits, start, deadline=time.monotonic() + 5)
    assert got is not None and violations(inst, got) == []
    assert evaluate(inst, got).D == 0
    assert 2 not in got  # h2 stays off
    assert sorted(got[:2]) == [0, 1] and sorted(got[2:]) == [0, 1]  # one swap
    assert evaluate(inst, got).P == evaluate(inst, start).P
    assert score(inst, got, w, limits).F < score(inst, start, w, limits).F


def test_calming_prices_a_sent_turtle_by_where_its_neighbours_are() -> None:
    # As above, but h1's turtles talk only to p, in another rack: sending one from h1 to
    # h0 (same rack) changes no link of theirs. Priced as if all their traffic crossed
    # racks, the swap looked dearer than switching h2 on, and calming took h2.
    hosts = [host(f"h{i}", cores=8, domains=1) for i in range(3)]
    hosts.append(host("h3", "r2", cores=4, domains=1))  # full with p
    flows = [{"src": f"t{i}", "dst": "p", "bytes_per_s": 1e6} for i in range(2)]
    jobs = [
        {"name": "A", "containers": [container(f"a{i}", 4, mpki=15) for i in range(2)]},
        {
            "name": "T",
            "containers": [container(f"t{i}", 4) for i in range(2)] + [container("p", 4)],
            "traffic": flows,
        },
    ]
    inst = instance(hosts, jobs)
    start = (0, 0, 1, 1, 3)
    w = Weights(1, 10, 10)
    limits = bounds(inst)
    got = calming.improve(inst, w, limits, start, deadline=time.monotonic() + 5)
    assert got is not None and violations(inst, got) == []
    assert evaluate(inst, got).D == 0
    assert 2 not in got  # h2 stays off: one swap
    assert evaluate(inst, got).C == evaluate(inst, start).C
    assert evaluate(inst, got).P == evaluate(inst, start).P


def test_fathom_packs_the_cheapest_racks_first() -> None:
    # Rack r1 (listed first) holds dear 16-core hosts, r2 cheap 64-core ones: a core of a
    # full host costs 11.4 W on r1 and 8.2 W on r2, so the packed schedule powers one r2
    # host, not both of r1's.
    dear = {"cores": 16, "domains": 1, "idle": 85, "peak": 190, "off": 7}
    cheap = {"cores": 64, "domains": 4, "idle": 210, "peak": 540, "off": 14}
    hosts = [host(f"d{i}", "r1", **dear) for i in range(2)]
    hosts += [host(f"c{i}", "r2", **cheap) for i in range(2)]
    jobs = [{"name": "J", "containers": [container(f"j{i}", 8) for i in range(4)]}]
    inst = instance(hosts, jobs)
    assert [inst.hosts[h].name for h in fathom._order(inst)] == ["c0", "c1", "d0", "d1"]
    packed = next(fathom.candidates(inst))
    assert {inst.hosts[h].name for h in packed} == {"c0"}
    # The evaluator agrees it is the cheaper schedule: r1 first would power two hosts.
    assert evaluate(inst, packed).P < evaluate(inst, corerr(inst)).P


def test_fathom_packs_a_stencil_in_blocks_not_rows() -> None:
    # A 4 x 4 five-point stencil of one-core turtles listed row by row, on four 4-core
    # hosts: packed in listed order each host holds a row and all 12 vertical flows cross
    # hosts; in region-growing order (locality.py) each holds a 2 x 2 block and 8 cross,
    # the least any split into four hosts cuts.
    names = [f"s{i}" for i in range(16)]
    flows = [{"src": names[a], "dst": names[b], "bytes_per_s": 1.0} for a, b in stencil_edges(16)]
    job = {"name": "S", "containers": [container(n, 1) for n in names], "traffic": flows}
    inst = instance([host(f"h{i}", cores=4, domains=1) for i in range(4)], [job])
    assert pytest.approx(2 * 12 * 1.0) == evaluate(inst, corerr(inst)).C
    packed = next(fathom.candidates(inst))
    assert violations(inst, packed) == []
    assert pytest.approx(2 * 8 * 1.0) == evaluate(inst, packed).C  # both ways, same rack
    hosts_of = [packed[k] for k in (0, 1, 4, 5)]
    assert len(set(hosts_of)) == 1  # the top-left block shares a host


@pytest.mark.parametrize("seed", range(8))
def test_cpsat_matches_exact_on_four_hosts_and_eight_containers(seed: int) -> None:
    # The size for the oracle: 4 hosts x 8 containers, two racks, random weights.
    rng = random.Random(seed)
    inst = build_instance(*enumerable_instance(seed, hosts=4, containers=8))
    w = Weights(*(float(rng.randint(1, 10)) for _ in range(3)))
    oracle = place("exact", inst, w, OPTS)
    got = place("cpsat", inst, w, OPTS)
    assert oracle.score is not None and got.score is not None
    assert got.status == "OPTIMAL"
    assert pytest.approx(oracle.score.F, abs=1e-6) == got.score.F


def test_progress_reports_the_best_bound_so_far_and_never_below_zero() -> None:
    # CP-SAT's own bound starts far below 0 (F never is) and may fall back between turns.
    seen: list[Progress] = []
    watch = Stopwatch(SolveOptions(time_limit=1, on_progress=seen.append))
    watch.offer(0.5, -4.287793)
    watch.offer(0.4, 0.3)
    watch.offer(0.35, 0.1)
    watch.offer(0.34)
    assert [p.bound for p in seen] == [0.0, 0.3, 0.3, None]
