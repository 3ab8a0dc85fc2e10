"""Groups on measured memories: every container's memory differs, as on real snapshots.

Memory matters only to M, so groups form without it; with a current placement the
models price M by which members stay, and must agree with the evaluator exactly.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from conftest import container, host, instance
from ortools.sat.python import cp_model

from clavis.instance import Instance, build_instance
from clavis.model import Placement
from clavis.objectives import Weights, bounds, evaluate, score
from clavis.placement import SolveOptions, place
from clavis.placement import bound as rack
from clavis.placement.cpsat import build_model, canonical, decode
from clavis.placement.exact import feasible_assignments
from clavis.placement.symmetry import container_groups, host_types
from clavis.synthetic import small_instance

OPTS = SolveOptions(time_limit=20, seed=1, workers=2)
GIB = 2**30


def distinct_memories(inst: Instance, rng: random.Random) -> Instance:
    """The same instance with every container's memory moved by a different odd amount
    of bytes (measured memories never match)."""
    used: set[int] = set()
    out = []
    for c in inst.containers:
        mem = c.memory_bytes + rng.randrange(1, 2**20) * 2 + 1
        while mem in used:
            mem += 2
        used.add(mem)
        out.append(dataclasses.replace(c, memory_bytes=mem))
    return dataclasses.replace(inst, containers=tuple(out))


def _talking_job(name: str, n: int, mems: list[int]) -> dict[str, object]:
    names = [f"{name}{i}" for i in range(n)]
    talk = [{"src": a, "dst": b, "bytes_per_s": 1e6} for a in names for b in names if a != b]
    return {
        "name": name,
        "containers": [container(x, mem=m) for x, m in zip(names, mems, strict=True)],
        "traffic": talk,
    }


def test_groups_ignore_memory_and_list_the_largest_first() -> None:
    mems = [3 * GIB + 7, 5 * GIB + 1, GIB + 3, 5 * GIB + 2]
    for current in (None, {"a0": "h0", "a1": "h0", "a2": "h1", "a3": "h1"}):
        inst = instance([host("h0"), host("h1")], [_talking_job("a", 4, mems)], current=current)
        groups = container_groups(inst)
        assert len(groups) == 1
        assert [inst.containers[m].memory_bytes for m in groups[0].members] == sorted(
            mems, reverse=True
        )


def test_hosts_with_residents_of_different_memory_are_not_interchangeable() -> None:
    job = _talking_job("a", 2, [GIB, 2 * GIB])
    inst = instance([host("h0"), host("h1"), host("h2")], [job], current={"a0": "h0", "a1": "h1"})
    types = host_types(inst, container_groups(inst))
    assert sorted(map(sorted, types)) == [[0], [1], [2]]
    same = _talking_job("a", 2, [GIB, GIB])
    inst = instance([host("h0"), host("h1"), host("h2")], [same], current={"a0": "h0", "a1": "h1"})
    assert sorted(map(sorted, host_types(inst, container_groups(inst)))) == [[0, 1], [2]]


def test_decode_keeps_the_largest_residents() -> None:
    mems = [GIB + 1, 4 * GIB + 1, 2 * GIB + 1]
    current = {"a0": "h0", "a1": "h0", "a2": "h0"}
    inst = instance([host("h0"), host("h1")], [_talking_job("a", 3, mems)], current=current)
    _, v = build_model(inst, Weights(1, 1, 1, 1))
    assert len(v.groups) == 1
    a = decode(inst, v, {(0, 0): 1, (0, 1): 2})
    assert a == (1, 0, 1)  # the 4 GiB container stays on h0
    assert mems[0] + mems[2] == evaluate(inst, a).M


@pytest.mark.parametrize("seed", range(24))
def test_cpsat_objective_equals_the_evaluator_on_distinct_memories(seed: int) -> None:
    rng = random.Random(500 + seed)
    for _ in range(50):  # the first draw with a current placement
        cluster, workload, current = small_instance(rng)
        if current:
            break
    assert current
    inst = distinct_memories(build_instance(cluster, workload, Placement(assignment=current)), rng)
    # Memory splits no group: the groups are those of the same instance at equal memories.
    equal = [dataclasses.replace(c, memory_bytes=GIB) for c in inst.containers]
    plain = container_groups(dataclasses.replace(inst, containers=tuple(equal)))
    assert {frozenset(g.members) for g in container_groups(inst)} == {
        frozenset(g.members) for g in plain
    }
    w = Weights(*(float(rng.randint(0, 10)) for _ in range(3)), float(rng.randint(1, 5)))
    oracle = place("exact", inst, w, OPTS)
    got = place("cpsat", inst, w, OPTS)
    if oracle.score is None:
        assert got.score is None
        return
    assert got.status == "OPTIMAL" and got.score is not None and got.assignment is not None
    assert pytest.approx(oracle.score.F, abs=1e-7) == got.score.F
    # CP-SAT stops at its absolute gap limit (1e-4 by default) on float objectives.
    assert got.bound is not None and got.score.F - 1e-4 <= got.bound <= got.score.F + 1e-9


@pytest.mark.parametrize("seed", range(12))
def test_model_objective_equals_the_evaluator_at_every_placement(seed: int) -> None:
    """Fix the model's counts to those of a random placement: its objective is the
    evaluator's F of the decoded placement, which keeps at least as much as the placement
    itself (the largest residents stay)."""
    rng = random.Random(900 + seed)
    for _ in range(50):
        cluster, workload, current = small_instance(rng)
        if current:
            break
    inst = distinct_memories(build_instance(cluster, workload, Placement(assignment=current)), rng)
    w = Weights(*(float(rng.randint(0, 10)) for _ in range(3)), float(rng.randint(1, 5)))
    placements = feasible_assignments(inst)
    for drawn in rng.sample(placements, min(8, len(placements))):
        model, v = build_model(inst, w)
        # Identical hosts are ordered by load in the model; relabel them the same way.
        a = canonical(inst, v.groups, drawn)
        group_of = {m: gi for gi, g in enumerate(v.groups) for m in g.members}
        counts = Counter((group_of[m], h) for m, h in enumerate(a))
        for key, x in v.y.items():
            model.add(x == counts.get(key, 0))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(model) == cp_model.OPTIMAL
        decoded = decode(inst, v, {key: counts.get(key, 0) for key in v.y})
        f = score(inst, decoded, w).F
        assert pytest.approx(f, abs=1e-9) == solver.objective_value
        assert f <= score(inst, a, w).F + 1e-12


def test_thousands_of_groups_neither_crash_nor_enumerate() -> None:
    """A ring of 1,200 containers is 1,200 singleton groups: deeper than Python's
    recursion limit. The rack problem is refused (too many patterns), not a crash."""
    names = [f"r{i}" for i in range(1200)]
    ring = [
        {"src": names[i], "dst": names[(i + 1) % len(names)], "bytes_per_s": 1e6}
        for i in range(len(names))
    ]
    jobs = [{"name": "ring", "containers": [container(n, 1) for n in names], "traffic": ring}]
    inst = instance([host(f"h{i}", cores=8) for i in range(160)], jobs)
    assert len(container_groups(inst)) == 1200
    w = Weights(1, 1, 1)
    assert rack.prepare(inst, w, bounds(inst)) is None
    # A few groups still enumerate every pattern, the empty host first.
    small = instance([host("h0", cores=4)], [_talking_job("a", 3, [GIB, 2 * GIB, 3 * GIB])])
    pb = rack.prepare(small, w, bounds(small))
    assert pb is not None
    assert [p.counts for p in pb.patterns[0]] == [(0,), (1,), (2,)]
