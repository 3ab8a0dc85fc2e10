"""Shared builders for solver tests: small instances written in code, not fixtures on disk."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from clavis.instance import Instance, build_instance
from clavis.model import Cluster, Placement, Workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SOLVER_BENCH = ROOT / "bench" / "solver"


def bench_module(name: str) -> ModuleType:
    """A script of bench/solver loaded as a module (they are scripts, not a package),
    registered under its name: dataclasses and the scripts' own imports look it up there."""
    spec = importlib.util.spec_from_file_location(name, SOLVER_BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def host(
    name: str,
    rack: str = "r1",
    *,
    cores: int = 8,
    domains: int = 2,
    idle: float = 100,
    peak: float = 180,
    off: float = 10,
) -> dict[str, Any]:
    return {
        "name": name,
        "rack": rack,
        "cores": cores,
        "domains": {"count": domains, "cores_per_domain": cores // domains},
        "power": {"idle_w": idle, "peak_w": peak, "off_w": off},
    }


def container(name: str, cores: int = 2, mpki: float = 1.0, mem: int = 2**30) -> dict[str, Any]:
    return {"name": name, "cores": cores, "memory_bytes": mem, "intensity_mpki": mpki}


def instance(
    hosts: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    current: dict[str, str] | None = None,
    **cluster: Any,
) -> Instance:
    c = Cluster.model_validate({"hosts": hosts, **cluster})
    w = Workload.model_validate({"jobs": jobs})
    p = Placement(assignment=current) if current is not None else None
    return build_instance(c, w, p)


@pytest.fixture
def examples() -> Path:
    return EXAMPLES
