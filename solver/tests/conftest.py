"""Shared builders for solver tests: small instances written in code, not fixtures on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clavis.instance import Instance, build_instance
from clavis.model import Cluster, Placement, Workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


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
