"""The bound bench's measure (cpsat.relaxation_bound) against enumerated optima, and its
report on hand-made runs (the bench itself runs for most of an hour)."""

from __future__ import annotations

import itertools
import sys
from types import ModuleType
from typing import Any

import pytest
from conftest import bench_module
from test_pool import _enumerated_repacks

from clavis.placement import lower
from clavis.placement.cpsat import relaxation_bound


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    bench_module("realistic_bench")  # bound_bench imports it by name
    return bench_module("bound_bench")


def test_relaxation_bound_never_exceeds_the_enumerated_optimum() -> None:
    raised = 0
    for inst, w, limits, optimum in itertools.islice(_enumerated_repacks(), 12):
        got = relaxation_bound(inst, w, 2.0)
        floor = lower.lower_bound(inst, w, limits).F
        assert floor - 1e-12 <= got <= optimum + 1e-9, (floor, got, optimum)
        raised += got > floor + 1e-9
    assert raised, "the pool bound raised lower.py's on none of the instances"


def _run(**kw: Any) -> Any:
    fields: dict[str, Any] = {
        "instance": "realistic-8-32-s1-cur", "group": "g", "hosts": 8, "containers": 32,
        "current": True, "weights": [1, 1, 1, 1], "method": "plain", "limit": 300.0,
        "exit_code": 0, "status": "OPTIMAL", "F": 0.2, "bound": 0.2, "gap": 0.0,
        "solve_seconds": 20.0, "wall_seconds": 22.0, "peak_rss_mib": 150.0, "in_time": True,
        "message": "",
    }  # fmt: skip
    fields.update(kw)
    return sys.modules["realistic_bench"].Run(**fields)


def _case(
    bench: ModuleType, name: str, current: bool, exact: Any, *, bound: float, f: float
) -> Any:
    return bench.Case(
        instance=name, hosts=8, containers=32, current=current, weights=[1, 1, 1, 1],
        exact=exact, relaxation=bound, relaxation_seconds=0.1,
        cpsat=_run(method="cpsat", limit=10.0, status="FEASIBLE", F=f, gap=0.05),
    )  # fmt: skip


def test_the_report_measures_each_bound_against_its_proven_optimum(bench: ModuleType) -> None:
    cases = [
        _case(bench, "a-cur", True, _run(F=0.2), bound=0.192, f=0.2),  # 4% under
        _case(bench, "b-cur", True, _run(F=0.4), bound=0.3, f=0.44),  # 25% under, +10%
        _case(bench, "c-cur", True, _run(status="FEASIBLE", F=0.3), bound=0.2, f=0.3),
        _case(bench, "d-nocur", False, _run(F=0.1), bound=0.11, f=0.1),  # above: invalid
    ]
    assert cases[0].bound_gap == pytest.approx(0.04)
    assert cases[1].excess == pytest.approx(0.1)
    assert cases[2].optimum is None and cases[2].bound_gap is None
    repacks = bench.summary(cases, current=True)
    assert repacks["instances"] == 3 and repacks["proved"] == 2
    assert repacks["over_2pct"] == 2 and repacks["over_5pct"] == 1
    assert repacks["valid"] is True
    assert bench.summary(cases, current=False)["valid"] is False
    info = {"cpu": "x", "cores": 2, "memory_gib": 1, "python": "3", "ortools": "9",
            "pymoo": "0", "date": "today"}  # fmt: skip
    text = bench.markdown(info, cases, {"e-cur": "fits on no host"}, 600.0)
    assert "| c-cur | 1,1,1,1 | not proved: FEASIBLE |" in text
    assert "e-cur (fits on no host)" in text
    assert "2 of 3 proved; the bound's gap to the optimum 14.5% / 25.0% (least 4.0%)" in text
    assert "bound never above the optimum: **no**" in text
