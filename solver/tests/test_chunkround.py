"""The chunk master's rounding (placement/chunkround.py): always a valid placement, the
master's chunks kept where it covers every container, and regions grown to the sizes
the places ask for (locality.grown)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from test_lower import drained_cases, enumerated_cases

from clavis.instance import Instance, build_instance
from clavis.objectives import Weights, bounds, score, violations
from clavis.placement import SolveOptions, chunkround, chunks, cpsat, locality
from clavis.placement.baselines import corerr
from clavis.placement.result import Stopwatch
from clavis.realistic import RealisticSpec, generate


def _master(inst: Instance, w: Weights) -> tuple[chunks.ChunkProblem, chunks.ChunkAnswer] | None:
    pb = chunks.prepare(inst, w, bounds(inst))
    if pb is None:
        return None
    return pb, chunks.solve(pb, time.monotonic() + 20, inst=inst)


def _realistic(hosts: int, seed: int) -> Instance:
    cluster, workload, _ = generate(RealisticSpec(hosts=hosts, seed=seed)).models()
    return build_instance(cluster, workload)


@pytest.mark.parametrize("up", [0.0, 0.4, 1.0])
def test_rounding_is_a_valid_placement(up: float) -> None:
    rounded = 0
    cases = [*enumerated_cases(range(80)), *drained_cases()]
    cases += [(s, _realistic(48, s), [], Weights(5, 6, 7, 0)) for s in range(3)]
    for seed, inst, _placements, w in cases:
        got = _master(inst, w)
        if got is None or not got[1].converged:
            continue
        pb, answer = got
        assert answer.primal, seed  # a settled master reports its columns
        placed = chunkround.round_master(inst, pb, answer.primal, time.monotonic() + 5, up=up)
        if placed is None:
            continue
        assert len(placed) == len(inst.containers)
        assert violations(inst, placed) == [], seed
        rounded += 1
    assert rounded >= 40, rounded


def test_templates_take_floors_then_fractions_that_cover() -> None:
    inst = _realistic(64, 2)
    w = Weights(6, 5, 7, 0)
    got = _master(inst, w)
    assert got is not None and got[1].converged
    pb, answer = got
    for up in (0.0, 0.5, 1.0):
        tpls = chunkround.templates(pb, answer.primal, up)
        made = Counter(tpls)
        for col, x in answer.primal:
            whole = int(x + 1e-6)
            assert made[col] in (whole, whole + 1), (col, x, made[col])
            if made[col] == whole + 1:
                assert x - whole > up  # only fractions above ``up`` are taken again
        per_type = Counter(col.host_type for col in tpls)
        for t, n in per_type.items():
            assert n <= pb.types[t].hosts

    # Rounding up the fractions that cover something leaves few containers short (a
    # type's hosts may all be taken by floors already); the floors alone leave more.
    def short_after(up: float) -> int:
        short = Counter({gi: g.count for gi, g in enumerate(pb.groups)})
        for col in chunkround.templates(pb, answer.primal, up):
            for gi, n in col.counts:
                short[gi] -= n
        return sum(max(0, n) for n in short.values())

    assert short_after(0.0) <= len(inst.containers) // 50, short_after(0.0)
    assert short_after(0.0) < short_after(1.0)


def test_a_talking_jobs_chunks_stay_together() -> None:
    """Where the templates cover every container, each host runs of each job what its
    template says, and the rounding keeps more of the talking traffic on hosts than
    the hosts the same master lays out for a job-blind fill would."""
    inst = _realistic(64, 2)
    w = Weights(6, 5, 7, 0)
    got = _master(inst, w)
    assert got is not None
    pb, answer = got
    tpls = chunkround.templates(pb, answer.primal, 0.0)
    laid = chunkround.lay(inst, pb, tpls)
    placed = chunkround.round_master(inst, pb, answer.primal, time.monotonic() + 5, up=0.0)
    assert placed is not None
    key = {(g.job, g.cores, g.devil): gi for gi, g in enumerate(pb.groups)}
    on_host: dict[int, Counter[int]] = {}
    for ci, hi in enumerate(placed):
        c = inst.containers[ci]
        gi = key.get((c.job, c.cores, c.devil), key.get((-1, c.cores, c.devil)))
        on_host.setdefault(hi, Counter())[gi] += 1
    checked = 0
    for hi, col in laid.items():
        for gi, n in col.counts:
            # A template may hold more than is left of a group (it was taken again for
            # another group's fraction); never less than it runs.
            assert on_host.get(hi, Counter())[gi] <= n
            checked += on_host.get(hi, Counter())[gi] == n
    assert checked > len(laid) // 2


def test_a_ring_is_grown_in_arcs_of_the_sizes_asked() -> None:
    n = 24
    nbrs: dict[int, list[tuple[int, float]]] = {i: [] for i in range(n)}
    for i in range(n):
        j = (i + 1) % n
        nbrs[i].append((j, 1.0))
        nbrs[j].append((i, 1.0))
    sizes = [3, 5, 2, 6]
    order = locality.grown(list(range(n)), nbrs, sizes)
    assert sorted(order) == list(range(n))
    at = 0
    for size in [*sizes, 6]:  # the last size repeats: 3 + 5 + 2 + 6 = 16, then 6
        region = set(order[at : at + size])
        # An arc of the ring: all but one of its members have their successor in it.
        inside = sum(1 for i in region if (i + 1) % n in region)
        assert inside == size - 1, (size, sorted(region))
        at += size


def test_the_solve_rounds_a_settled_chunk_master_and_polishes_it() -> None:
    """cpsat's chunk turn (no current placement) returns the master's rounding beside
    its bound; the second start's polish keeps it valid and never raises F, and the
    host search given it as its second start ends at or below it."""
    inst = _realistic(64, 2)
    w = Weights(6, 5, 7, 0)
    limits = bounds(inst)
    k, _ = limits.linear(w)
    floor, rounded = cpsat._chunk_rounding(
        inst, w, limits, floor=0.0, start=None, seconds=20, rounding=True
    )
    assert rounded is not None and violations(inst, rounded) == []
    assert 0.0 < floor <= score(inst, rounded, w, limits).F
    polished = cpsat._second_start(inst, rounded, k, time.monotonic() + 3)
    assert violations(inst, polished) == []
    assert score(inst, polished, w, limits).F <= score(inst, rounded, w, limits).F + 1e-12
    # Without ``rounding`` the turn is the bound alone.
    assert cpsat._chunk_rounding(inst, w, limits, floor=0.0, start=None, seconds=20)[1] is None
    options = SolveOptions(time_limit=4, seed=0)
    plain = corerr(inst)
    best = (plain, score(inst, plain, w, limits), "FEASIBLE")
    got = cpsat._host_search(
        inst, w, options, limits=limits, best=best, watch=Stopwatch(options), second=rounded
    )
    assert violations(inst, got[0]) == []
    assert got[1].F <= score(inst, rounded, w, limits).F + 1e-12
