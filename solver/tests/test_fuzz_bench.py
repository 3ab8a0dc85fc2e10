"""The random-cluster bench's draws and report, on hand-made runs (the bench runs for minutes)."""

from __future__ import annotations

import random
import sys
from dataclasses import asdict
from types import ModuleType
from typing import Any

import pytest
from conftest import bench_module


@pytest.fixture(scope="module")
def fuzz() -> ModuleType:
    bench_module("realistic_bench")  # fuzz_bench imports it by name
    return bench_module("fuzz_bench")


def test_draws_are_valid_and_cover_zero_weights_and_repacks(fuzz: ModuleType) -> None:
    rng = random.Random(3)
    cases = [fuzz.draw(rng) for _ in range(200)]
    for c in cases:
        assert len(c.weights) == (4 if c.spec.current else 3)
        assert any(c.weights) and c.limit in fuzz.LIMITS
        assert 3 <= c.spec.hosts <= 2048
    assert any(c.weights[0] == 0 for c in cases)
    assert any(c.spec.current for c in cases) and not all(c.spec.current for c in cases)


def _checked(fuzz: ModuleType, *, f: float | None, alike: bool | None, **kw: Any) -> Any:
    fields: dict[str, Any] = {
        "instance": "fuzz-10-40-s1-nocur", "group": "g", "hosts": 10, "containers": 40,
        "current": False, "weights": [0, 1, 1], "method": "cpsat", "limit": 5.0,
        "exit_code": 0 if f is not None else 1,
        "status": "FEASIBLE" if f is not None else "UNKNOWN",
        "F": f, "bound": None if f is None else f * 0.8, "gap": None if f is None else 0.2,
        "solve_seconds": 4.9, "wall_seconds": 6.0, "peak_rss_mib": 150.0,
        "in_time": f is not None, "message": "",
    }  # fmt: skip
    fields.update(kw)
    run = sys.modules["realistic_bench"].Run(**fields)
    return fuzz.Checked({"hosts": 10}, run, f, alike)


def test_the_report_counts_late_runs_and_answers_scored_otherwise(fuzz: ModuleType) -> None:
    checked = [
        _checked(fuzz, f=0.5, alike=True),
        _checked(fuzz, f=0.4, alike=True, in_time=False, solve_seconds=9.0, instance="late"),
        _checked(fuzz, f=0.3, alike=False, weights=[1, 1, 1], instance="misscored"),
        _checked(fuzz, f=None, alike=None, instance="none"),
    ]
    payload = {"machine": {"cpu": "x", "cores": 2, "memory_gib": 1, "python": "3", "ortools": "9",
                           "pymoo": "0", "date": "today"},
               "config": {"cases": 4, "seed": 1}, "elapsed_s": 60.0,
               "cases": [asdict(c) for c in checked]}  # fmt: skip
    text = fuzz.markdown(payload)
    assert "within limit + max(5%, 2 s): 2 of 4" in text
    assert "(most past the limit: +4.00 s)" in text
    assert "no answer otherwise: 1" in text
    assert "Scored alike by `clavis evaluate` (F within 1e-05): 2 of 3" in text
    assert "| every weight above 0 | 1 | 20.0% |" in text
    for name in ("late", "misscored", "none"):  # each listed with its weights and limit
        assert f"- {name} (" in text
