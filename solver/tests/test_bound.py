"""The rack-configuration bound and model (placement/bound.py, placement/rackmodel.py)."""

from __future__ import annotations

import random
import time

import pytest
from conftest import container, host, instance

from clavis.instance import Instance, build_instance
from clavis.model import Placement
from clavis.objectives import Weights, bounds, evaluate, score, violations
from clavis.placement import SolveOptions, place, racklns, rackmodel
from clavis.placement import bound as rack
from clavis.placement.baselines import corerr, noderr
from clavis.synthetic import small_instance, table53_instance

OPTS = SolveOptions(time_limit=20, seed=1, workers=2)


@pytest.mark.parametrize("seed", range(30))
def test_bound_never_exceeds_the_exact_optimum(seed: int) -> None:
    rng = random.Random(1000 + seed)
    cluster, workload, current = small_instance(rng)
    inst = build_instance(cluster, workload, Placement(assignment=current) if current else None)
    w = Weights(*(float(rng.randint(1, 10)) for _ in range(3)), float(rng.randint(0, 3)))
    oracle = place("exact", inst, w, OPTS)
    if oracle.score is None:
        pytest.skip("infeasible instance")
    limits = bounds(inst)
    pb = rack.prepare(inst, w, limits)
    assert pb is not None
    # A loose incumbent, so that no branch is cut off by it.
    got = rack.rack_bound(
        pb, inst, weights=w, limits=limits, incumbent=oracle.score.F + 1.0, time_limit=10
    )
    assert got.bound <= oracle.score.F + 1e-7
    if got.assignment is not None:
        assert violations(inst, got.assignment) == []
        assert pytest.approx(score(inst, got.assignment, w, limits).F) == got.F


def test_pair_cut_fills_the_roomiest_racks() -> None:
    # Two racks of 32 hosts of 24 cores, 12-core containers: 64 per rack at most.
    hosts = [host(f"a{i}", "ra", cores=24, domains=4) for i in range(32)]
    hosts += [host(f"b{i}", "rb", cores=24, domains=4) for i in range(32)]
    names = [f"t{i}" for i in range(103)]
    # Uniform all-to-all traffic makes each job one group (symmetry.py).
    talk = [{"src": a, "dst": b, "bytes_per_s": 1e6} for a in names for b in names if a != b]
    jobs = [
        {"name": "T", "containers": [container(n, 12, mpki=0.5) for n in names], "traffic": talk},
    ]
    devils = [f"d{i}" for i in range(40)]
    dtalk = [{"src": a, "dst": b, "bytes_per_s": 1e6} for a in devils for b in devils if a != b]
    jobs.append(
        {"name": "D", "containers": [container(n, 12, mpki=20) for n in devils], "traffic": dtalk}
    )
    inst = instance(hosts, jobs)
    w = Weights(1, 1, 1)
    pb = rack.prepare(inst, w, bounds(inst))
    assert pb is not None
    t = next(gi for gi, g in enumerate(pb.groups) if not g.devil)
    d = next(gi for gi, g in enumerate(pb.groups) if g.devil)
    free = rack.max_pairs(pb, frozenset())
    assert free[t] == 64 * 63 // 2 + 39 * 38 // 2
    assert free[d] == 40 * 39 // 2
    # A devil job that may not contend has one container per host: 32 per rack.
    calm = rack.max_pairs(pb, frozenset({pb.groups[d].job}))
    assert calm[d] == 32 * 31 // 2 + 8 * 7 // 2
    assert calm[t] == free[t]


def test_rack_model_round_trip_keeps_every_objective() -> None:
    cluster, workload = table53_instance(seed=3, max_containers=16, hosts=128)
    inst = build_instance(cluster, workload)
    pb = rack.prepare(inst, Weights(1, 1, 1), bounds(inst))
    assert pb is not None and not rackmodel.needs_exact(inst)
    for a in (corerr(inst), noderr(inst)):
        assert a is not None
        counts = rackmodel.hint_counts(pb, a)
        back = rack.decode(pb, inst, rackmodel.per_rack_uses(pb, counts))
        assert back is not None and violations(inst, back) == []
        # Identical racks may be permuted, so P, D and C are kept, not the host names.
        assert evaluate(inst, back) == evaluate(inst, a)


def test_table53_instance_is_proven_optimal() -> None:
    cluster, workload = table53_instance(seed=1160, max_containers=16, hosts=128)
    inst = build_instance(cluster, workload)
    got = place("cpsat", inst, Weights(7, 7, 1), OPTS)
    assert got.status == "OPTIMAL" and got.gap is not None
    assert got.gap <= 1e-4
    assert got.score is not None and got.assignment is not None
    assert violations(inst, got.assignment) == []
    # The per-host formulation proves far less in the same time: this is what the rack
    # bound adds.
    assert got.bound is not None and got.bound >= 0.99 * got.score.F


def test_rack_model_needs_the_exact_problem_with_a_current_placement_or_drained_hosts() -> None:
    hosts = [host("h1"), host("h2")]
    jobs = [{"name": "j", "containers": [container("a"), container("b")]}]
    assert not rackmodel.needs_exact(instance(hosts, jobs))
    assert rackmodel.needs_exact(instance(hosts, jobs, current={"a": "h1"}))
    drained = [host("h1"), {**host("h2"), "state": "drain"}]
    assert rackmodel.needs_exact(instance(drained, jobs))


def test_too_many_patterns_means_no_bound() -> None:
    hosts = [host(f"h{i}", cores=64, domains=4) for i in range(4)]
    jobs = [
        {"name": f"j{k}", "containers": [container(f"c{k}_{i}", 1) for i in range(40)]}
        for k in range(6)
    ]
    inst = instance(hosts, jobs)
    assert rack.prepare(inst, Weights(1, 1, 1), bounds(inst)) is None
    got = place("cpsat", inst, Weights(1, 1, 1), SolveOptions(time_limit=2, seed=0, workers=2))
    assert got.assignment is not None  # the per-host model still answers


def test_all_to_all_jobs_solve_like_the_listed_flows() -> None:
    spelt = build_instance(*table53_instance(seed=5, max_containers=3, hosts=12))
    compact = build_instance(*table53_instance(seed=5, max_containers=3, hosts=12, compact=True))
    assert compact.uniform and not compact.flows and spelt.flows
    w = Weights(2, 5, 9)
    a = place("cpsat", spelt, w, OPTS)
    b = place("cpsat", compact, w, OPTS)
    assert a.status == b.status == "OPTIMAL"
    assert a.score is not None and b.score is not None
    assert pytest.approx(a.score.F, abs=1e-9) == b.score.F
    # The plain model spells the pairs out; its answer scores alike on both forms.
    plain = place("plain", compact, w, SolveOptions(time_limit=2, seed=1, workers=2))
    assert plain.assignment is not None and plain.score is not None
    assert plain.score.F >= a.score.F - 1e-9
    assert pytest.approx(plain.score.F) == score(spelt, plain.assignment, w).F


def _rack_search_case() -> tuple[Instance, Weights, rack.RackProblem]:
    cluster, workload = table53_instance(seed=21, max_containers=24, hosts=96)
    inst = build_instance(cluster, workload)
    w = Weights(3, 8, 6)
    pb = rack.prepare(inst, w, bounds(inst))
    assert pb is not None and len(pb.racks) == 3
    return inst, w, pb


def test_rack_search_improves_and_f_moves_with_the_rack_costs() -> None:
    inst, w, pb = _rack_search_case()
    limits = bounds(inst)
    start = noderr(inst)
    assert start is not None
    seen: list[float] = []
    got = racklns.improve(
        pb, inst, start, deadline=time.monotonic() + 10, seed=3,
        found=lambda a: seen.append(score(inst, a, w, limits).F),
    )  # fmt: skip
    assert got is not None and violations(inst, got) == []
    before, after = score(inst, start, w, limits).F, score(inst, got, w, limits).F
    assert after < before
    assert seen == sorted(seen, reverse=True) and seen[-1] == pytest.approx(after)
    # F is the racks' configuration costs plus the straggler charges plus a constant:
    # the search's own account of a change is the evaluator's.
    cost = [
        racklns.total_cost(racklns.Search(pb, [dict(u) for u in rack.rack_uses(pb, a)]))
        for a in (start, got)
    ]
    assert cost[1] - cost[0] == pytest.approx(after - before, abs=1e-9)


def test_rack_search_without_time_changes_nothing() -> None:
    inst, _, pb = _rack_search_case()
    start = corerr(inst)
    assert start is not None
    assert racklns.improve(pb, inst, start, deadline=time.monotonic(), seed=0) is None


def test_dives_give_whole_placements_above_the_bound() -> None:
    inst, w, pb = _rack_search_case()
    limits = bounds(inst)
    start = corerr(inst)
    assert start is not None
    got = rack.rack_bound(
        pb, inst, weights=w, limits=limits, incumbent=score(inst, start, w, limits).F,
        time_limit=15, seed=start,
    )  # fmt: skip
    pool = rack.seed_columns(pb, start)
    devils = frozenset(pb.devil_cores)
    for lagging in (devils, frozenset()):
        placed = rack.dive(pb, inst, pool, lagging, time.monotonic() + 10)
        assert placed is not None
        assert violations(inst, placed) == []
        f = score(inst, placed, w, limits).F
        assert f >= got.bound - 1e-9


def test_residual_problem_keeps_what_is_left() -> None:
    _, _, pb = _rack_search_case()
    sizes = [max(0, g.size - 5) for g in pb.groups]
    part = rack.residual(pb, sizes, [2])
    assert [g.size for g in part.groups] == sizes
    assert part.rack_counts == [2] and len(part.racks) == 2
    assert part.racks_of_type == [[0, 1]]
