"""The chunk bound (placement/chunks.py): never above the optimum, exact pricing, and
more than the pool bound where talking jobs must share hosts."""

from __future__ import annotations

import itertools
import time

import numpy as np
from test_lower import drained_cases, enumerated_cases

from clavis.instance import Instance, build_instance
from clavis.model import Cluster, Workload
from clavis.objectives import Weights, bounds, score
from clavis.placement import chunks, pool
from clavis.placement.cpsat import relaxation_bound
from clavis.realistic import RealisticSpec, generate
from clavis.synthetic import host_document


def _optimum(inst: Instance, placements: list[tuple[int, ...]], w: Weights) -> float:
    limits = bounds(inst)
    return min(score(inst, list(a), w, limits).F for a in placements)


def test_chunk_bound_never_exceeds_the_enumerated_optimum() -> None:
    checked = above_pool = repacks = drained = above_repack_pool = 0
    for seed, inst, placements, w in [*enumerated_cases(range(240)), *drained_cases()]:
        limits = bounds(inst)
        pb = chunks.prepare(inst, w, limits)
        if pb is None:
            continue
        got = chunks.solve(pb, time.monotonic() + 5, inst=inst)
        assert got.converged, seed
        optimum = _optimum(inst, placements, w)
        assert got.bound <= optimum + 1e-9, (seed, got.bound, optimum)
        relaxed = pool.prepare(inst, w, limits, stay=False)
        assert relaxed is not None
        above_pool += got.bound > pool.solve(relaxed, time.monotonic() + 5).bound + 1e-6
        checked += 1
        own = [ht for ht in pb.types if ht.keep]
        if own:  # a repack: hosts with residents are types of their own
            repacks += 1
            drained += any(ht.residents_only for ht in own)
            full = pool.prepare(inst, w, limits)
            assert full is not None
            above_repack_pool += got.bound > pool.solve(full, time.monotonic() + 5).bound + 1e-6
    assert checked > 40, checked
    assert repacks > 20 and drained > 5, (repacks, drained)
    # Not vacuous: on some of these it proves more than the pool bound, also in repacks
    # more than the pool's with its Stay rows.
    assert above_pool > 0, (above_pool, checked)
    assert above_repack_pool > 0, (above_repack_pool, repacks)


def test_a_bound_cut_short_or_seeded_is_still_valid() -> None:
    for seed, inst, placements, w in enumerated_cases(range(60)):
        pb = chunks.prepare(inst, w, bounds(inst))
        if pb is None:
            continue
        optimum = _optimum(inst, placements, w)
        short = chunks.solve(pb, time.monotonic() + 0.002, inst=inst)
        assert short.bound <= optimum + 1e-9, seed
        # Seeded with the optimum's hosts it settles to the same bound.
        best = min(placements, key=lambda a: score(inst, list(a), w, bounds(inst)).F)
        seeded = chunks.solve(pb, time.monotonic() + 5, inst=inst, start=list(best))
        plain = chunks.solve(pb, time.monotonic() + 5, inst=inst)
        assert seeded.converged and plain.converged
        assert abs(seeded.bound - plain.bound) < 1e-6, seed
        assert seeded.bound <= optimum + 1e-9, seed


def _inside_by_brute_force(inst: Instance, members: list[int], k: int) -> float:
    """The most bytes/s inside any k of a job's containers, every subset tried."""
    flows: dict[tuple[int, int], float] = {}
    for f in inst.all_flows():
        flows[(f.a, f.b)] = flows.get((f.a, f.b), 0.0) + f.bytes_per_s
    best = 0.0
    for part in itertools.combinations(members, k):
        inside = set(part)
        best = max(best, sum(w for (a, b), w in flows.items() if a in inside and b in inside))
    return best


def _job_of(kind: str, n: int) -> dict[str, object]:
    names = [f"c{i}" for i in range(n)]
    job: dict[str, object] = {
        "name": "j",
        "containers": [
            {"name": x, "cores": 1, "memory_bytes": 1, "intensity_mpki": 1.0} for x in names
        ],
    }
    if kind == "all":
        job["all_to_all_bytes_per_s"] = 3.0
    elif kind == "ring":
        job["traffic"] = [
            {"src": names[i], "dst": names[(i + 1) % n], "bytes_per_s": 1.0 + i} for i in range(n)
        ]
    elif kind == "grid":  # 3 x 3 five-point stencil
        pairs = [(r * 3 + c, r * 3 + c + 1) for r in range(3) for c in range(2)]
        pairs += [(r * 3 + c, (r + 1) * 3 + c) for r in range(2) for c in range(3)]
        job["traffic"] = [{"src": names[a], "dst": names[b], "bytes_per_s": 2.0} for a, b in pairs]
    else:  # a star whose spokes differ
        job["traffic"] = [
            {"src": names[0], "dst": names[i], "bytes_per_s": float(i)} for i in range(1, n)
        ]
    return job


def test_a_chunk_keeps_no_more_than_its_best_k_containers_and_cliques_and_rings_exactly() -> None:
    cluster = Cluster.model_validate({"hosts": [host_document("h", "r", 16, 1, (50, 150, 5))]})
    for kind, n in [("all", 6), ("ring", 7), ("grid", 9), ("star", 6)]:
        inst = build_instance(cluster, Workload.model_validate({"jobs": [_job_of(kind, n)]}))
        inside = chunks.chunk_inside(inst, n)[0]
        for k in range(n + 1):
            truth = _inside_by_brute_force(inst, list(range(n)), k)
            assert inside[k] >= truth - 1e-9, (kind, k, inside[k], truth)
            if kind == "all" or (kind == "ring" and k < n - 1):
                # A clique keeps every pair, a ring's heaviest path every pair but one.
                assert inside[k] <= truth + 1e-9, (kind, k, inside[k], truth)


def _realistic(hosts: int, seed: int) -> Instance:
    cluster, workload, _ = generate(
        RealisticSpec(hosts=hosts, seed=seed, containers=4 * hosts, current=False)
    ).models()
    return build_instance(cluster, workload)


def test_on_realistic_snapshots_it_proves_more_than_the_pool_where_jobs_must_share_hosts() -> None:
    raised = 0
    for seed in (1, 2, 3):
        inst = _realistic(64, seed)
        w = Weights(6, 5, 7)
        limits = bounds(inst)
        pb = chunks.prepare(inst, w, limits)
        assert pb is not None
        got = chunks.solve(pb, time.monotonic() + 30, inst=inst)
        assert got.converged
        relaxed = pool.prepare(inst, w, limits, stay=False)
        assert relaxed is not None
        answer = pool.solve(relaxed, time.monotonic() + 10)
        floor = max(answer.bound, pool.dive(relaxed, answer, time.monotonic() + 10).bound)
        raised += got.bound > floor + 1e-4
        # relaxation_bound (what a solve proves without CP-SAT) takes the larger.
        assert relaxation_bound(inst, w, 30) >= max(floor, got.bound) - 1e-9
    assert raised >= 2, raised


def test_pricing_finds_the_best_pattern_of_every_enumerated_one() -> None:
    # Random duals: the DP's best reduced cost equals the least over every pattern a host
    # type can run, enumerated (calm patterns, and all with devils charged as contended).
    rng = np.random.default_rng(5)
    for _seed, inst, _placements, w in enumerated_cases(range(45)):
        pb = chunks.prepare(inst, w, bounds(inst))
        if pb is None:
            continue
        n = len(pb.jobs)
        for _ in range(3):
            du = chunks._Duals(
                np.zeros(len(pb.types)),
                rng.uniform(0, 0.2, len(pb.groups)),
                rng.uniform(0, 0.05, n),
                rng.uniform(0, 1, n),
                np.zeros(n),
                float(rng.uniform(0, 1)),
            )
            for t, ht in enumerate(pb.types):
                tables = chunks._pricing(pb, t, {})
                for contended in (False, True):
                    got, col = chunks._price(pb, t, tables, du, contended)
                    want = _enumerated_least(pb, t, du, contended)
                    assert abs(got - want) < 1e-9, (t, contended, got, want)
                    if col is not None:
                        item_of = {gi: ii for ii, it in enumerate(pb.jobs) for gi in it.groups}
                        rc = chunks._reduced(pb, col, du, item_of)
                        # the column found costs what pricing says (a calm one charged
                        # as contended, less)
                        assert rc <= got + 1e-9, (rc, got)
                assert ht.hosts > 0


def _enumerated_least(pb: chunks.ChunkProblem, t: int, du: chunks._Duals, contended: bool) -> float:
    ht = pb.types[t]
    ranges = [range(0, min(g.count, ht.cores // g.cores) + 1) for g in pb.groups]
    least = np.inf
    for counts in itertools.product(*ranges):
        used = sum(n * g.cores for n, g in zip(counts, pb.groups, strict=True))
        if used == 0 or used > ht.cores:
            continue
        devils = sum(n for n, g in zip(counts, pb.groups, strict=True) if g.devil)
        dc = sum(n * g.cores for n, g in zip(counts, pb.groups, strict=True) if g.devil)
        hot = devils >= 2 and dc > ht.tolerance
        if hot and not contended:
            continue
        keep = dict(ht.keep)
        residents = [len(keep.get(gi, (0.0,))) - 1 for gi in range(len(counts))]
        if ht.residents_only and any(n > r for n, r in zip(counts, residents, strict=True)):
            continue  # a drained host runs its residents only
        value = (1 - du.power) * (ht.switch_on + ht.slope * used)
        # it keeps, of each group, its heaviest residents, as many as it counts
        value -= sum(keep[gi][min(n, residents[gi])] for gi, n in enumerate(counts) if gi in keep)
        per_item = [0] * len(pb.jobs)
        for ii, item in enumerate(pb.jobs):
            for gi in item.groups:
                per_item[ii] += counts[gi]
        for gi, n in enumerate(counts):
            value -= du.cover[gi] * n
        for ii, item in enumerate(pb.jobs):
            if item.inside is not None:
                value -= du.chunk[ii] * item.inside[per_item[ii]]
            if contended:
                value += du.lag[ii] * sum(counts[gi] for gi in item.groups if pb.groups[gi].devil)
        least = min(least, value)
    return float(least) if np.isfinite(least) else 0.0
