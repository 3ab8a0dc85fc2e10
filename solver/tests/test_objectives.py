"""The evaluator: the worked example of docs/objectives.md and each rule on its own."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from conftest import container, host, instance

from clavis.documents import load_cluster, load_placement, load_workload
from clavis.instance import build_instance
from clavis.objectives import Weights, bounds, evaluate, score, violations


def test_worked_example(examples: Path) -> None:
    d = examples / "worked"
    inst = build_instance(
        load_cluster(d / "cluster.yaml"),
        load_workload(d / "workload.yaml"),
        load_placement(d / "current.yaml"),
    )
    a = inst.assignment_of(load_placement(d / "placement.yaml"), "placement")
    s = score(inst, a, Weights.parse("1,1,1,1"))
    assert pytest.approx(440.0) == s.raw.P
    assert s.raw.D == 6.0
    assert pytest.approx(4e7) == s.raw.C
    assert s.raw.M == 4 * 2**30
    b = bounds(inst)
    assert pytest.approx((350.0, 440.0)) == (b.lo.P, b.hi.P)
    assert pytest.approx((6.0, 1e8, 13 * 2**30)) == (b.hi.D, b.hi.C, b.hi.M)
    assert s.normalised.as_tuple() == pytest.approx((1.0, 1.0, 0.4, 4 / 13))
    assert pytest.approx(0.676923, abs=1e-6) == s.F


def test_empty_host_counts_off_or_idle() -> None:
    jobs = [{"name": "j", "containers": [container("a", cores=4)]}]
    off = instance([host("h1"), host("h2")], jobs)
    idle = instance([host("h1"), host("h2")], jobs, empty_host="idle")
    assert pytest.approx(100 + 40 + 10) == evaluate(off, (0,)).P
    assert pytest.approx(100 + 40 + 100) == evaluate(idle, (0,)).P


def test_devils_within_domain_tolerance_do_not_contend() -> None:
    # 4 domains hold four 1-core devils; the fifth devil core makes the host contended.
    hosts = [host("h1", cores=8, domains=4), host("h2", cores=8, domains=4)]
    jobs = [
        {"name": f"j{i}", "containers": [container(f"c{i}", cores=1, mpki=9)]} for i in range(5)
    ]
    inst = instance(hosts, jobs)
    assert evaluate(inst, (0, 0, 0, 0, 1)).D == 0
    assert evaluate(inst, (0, 0, 0, 0, 0)).D == 5


def test_single_devil_container_alone_is_not_contended() -> None:
    inst = instance([host("h1")], [{"name": "j", "containers": [container("a", 8, mpki=20)]}])
    assert evaluate(inst, (0,)).D == 0


def test_straggler_rule_charges_the_whole_job() -> None:
    # Job A has devils on two hosts; only one of them is contended, yet all of A lags.
    hosts = [host("h1"), host("h2")]
    jobs = [
        {"name": "A", "containers": [container("a1", mpki=9), container("a2", mpki=9)]},
        {"name": "B", "containers": [container("b1", mpki=9), container("t", mpki=0.1)]},
    ]
    inst = instance(hosts, jobs)
    assert evaluate(inst, (0, 1, 0, 1)).D == 2 + 2 + 2  # h1 = {a1, b1}: A and B lag
    assert evaluate(inst, (0, 1, 1, 0)).D == 2 + 2 + 2  # h2 = {a2, b1}
    assert evaluate(inst, (0, 0, 1, 1)).D == 4  # only A lags: its two devils share h1


def test_traffic_link_classes_and_both_directions() -> None:
    hosts = [host("h1", "r1"), host("h2", "r1"), host("h3", "r2")]
    jobs = [
        {
            "name": "j",
            "containers": [container("a"), container("b")],
            "traffic": [
                {"src": "a", "dst": "b", "bytes_per_s": 3.0},
                {"src": "b", "dst": "a", "bytes_per_s": 2.0},
            ],
        }
    ]
    inst = instance(hosts, jobs, links={"same_rack": 1.5, "cross_rack": 7.0})
    assert evaluate(inst, (0, 0)).C == 0
    assert pytest.approx(5 * 1.5) == evaluate(inst, (0, 1)).C
    assert pytest.approx(5 * 7.0) == evaluate(inst, (0, 2)).C


def test_all_to_all_traffic_equals_the_same_flows_listed() -> None:
    hosts = [host("h1", "r1"), host("h2", "r1"), host("h3", "r2"), host("h4", "r2")]
    names = ["a", "b", "c", "d", "e"]
    listed = [
        {"src": x, "dst": y, "bytes_per_s": 8.0 if (x, y) == ("a", "b") else 3.0}
        for x in names
        for y in names
        if x != y
    ]
    extra = [{"src": "a", "dst": "b", "bytes_per_s": 5.0}]
    conts = [container(n, 1) for n in names]
    links = {"links": {"same_rack": 1.5, "cross_rack": 7.0}}
    spelt = instance(hosts, [{"name": "j", "containers": conts, "traffic": listed}], **links)
    compact = instance(
        hosts,
        [{"name": "j", "containers": conts, "traffic": extra, "all_to_all_bytes_per_s": 3.0}],
        **links,
    )
    assert len(compact.flows) == 1 and len(compact.uniform) == 1
    assert bounds(compact) == bounds(spelt)
    assert set(compact.all_flows()) == set(spelt.flows)
    for where in itertools.product(range(4), repeat=5):
        assert pytest.approx(evaluate(spelt, where).C) == evaluate(compact, where).C, where


def test_migration_counts_moved_memory_only() -> None:
    hosts = [host("h1"), host("h2")]
    jobs = [
        {
            "name": "j",
            "containers": [
                container("a", mem=10),
                container("b", mem=7),
                container("new", mem=1000),
            ],
        }
    ]
    inst = instance(hosts, jobs, current={"a": "h1", "b": "h1"})
    assert evaluate(inst, (0, 0, 1)).M == 0
    assert evaluate(inst, (1, 0, 0)).M == 10
    assert evaluate(inst, (1, 1, 1)).M == 17
    assert bounds(inst).hi.M == 17


def test_every_feasible_placement_normalises_into_unit_interval() -> None:
    hosts = [host("h1", "r1", idle=90, peak=200), host("h2", "r2", cores=4, idle=50, peak=70)]
    jobs = [
        {
            "name": "A",
            "containers": [container("a1", mpki=9), container("a2", mpki=5)],
            "traffic": [{"src": "a1", "dst": "a2", "bytes_per_s": 9.0}],
        },
        {"name": "B", "containers": [container("b1", mpki=0.3, cores=4)]},
    ]
    inst = instance(hosts, jobs, current={"a1": "h2"})
    b = bounds(inst)
    w = Weights.parse("1,1,1,1")
    seen = 0
    for a in itertools.product(range(2), repeat=3):
        if violations(inst, a):
            continue
        seen += 1
        n = score(inst, a, w, b).normalised
        assert all(-1e-12 <= v <= 1 + 1e-12 for v in n.as_tuple()), (a, n)
    assert seen > 0


def test_violations_name_the_overloaded_host() -> None:
    inst = instance([host("h1", cores=4, domains=2)], [{"name": "j", "containers": [
        container("a", cores=4), container("b", cores=2)]}], )  # fmt: skip
    assert violations(inst, (0, 0)) == ["host 'h1' holds 6 cores but has 4"]


@pytest.mark.parametrize("text", ["1,2", "a,b,c", "1,-1,1", "0,0,0", "1,nan,1", "1,2,3,4,5"])
def test_bad_weights_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Weights.parse(text)


def test_weights_scale_to_sum_one() -> None:
    w = Weights.parse("0.15,1.94,0.68")
    assert math.isclose(sum(w.as_tuple()), 1.0)
    assert pytest.approx(1.94 / 0.15) == w.D / w.P
