"""Nodes as a monitor and the solver see them: each container's cpuset holds its Slurm
CPUs= and its memory limit is its RealMemory; the solver's cluster document written at
up; `exec` runs Slurm commands in the shared directory every node sees."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from clavis.model import Cluster
from clavis_monitor import containers as cg
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

CPUSET = Path("/sys/fs/cgroup/cpuset")
MEMORY = Path("/sys/fs/cgroup/memory")
MIB = 1024 * 1024


def _cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _containers(testbed: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for h in testbed["hosts"] for c in h["containers"]]


def test_each_node_has_its_cpus_as_cpuset_and_its_realmemory_as_limit(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    topo = testbed["topology"]
    cpus, mem_mb = topo["cpus_per_container"], topo["memory_mb_per_container"]
    nodes = {}
    for line in tb.slurm(["scontrol", "show", "nodes", "-o"]).splitlines():
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        nodes[f["NodeName"]] = f
    for c in _containers(testbed):
        name = c["name"]
        live = _cpulist((CPUSET / f"lxc.payload.{name}" / "cpuset.cpus").read_text())
        assert live == c["cpuset"] and len(live) == cpus == c["cpus"], (name, live, c)
        limit = int((MEMORY / f"lxc.payload.{name}" / "memory.limit_in_bytes").read_text())
        assert limit == mem_mb * MIB == c["memory_mb"] * MIB, (name, limit)
        # a process in the node runs on exactly those CPUs
        assert tb.lxc_attach(name, "nproc").strip() == str(cpus)
        assert (nodes[name]["CPUTot"], nodes[name]["RealMemory"]) == (str(cpus), str(mem_mb))
    # the machine has as many CPUs as one host's nodes here: they share none
    per_host = topo["containers_per_host"] * cpus
    if len(set().union(*(set(c["cpuset"]) for c in _containers(testbed)))) >= per_host:
        for h in testbed["hosts"]:
            sets = [set(c["cpuset"]) for c in h["containers"]]
            assert len(set().union(*sets)) == per_host, (h["name"], sets)
    # and the monitor's container discovery reads the same sizes
    agent = Agent(
        parse(
            {
                "host": "r1h1",
                "containers": {"lxc_paths": [testbed["lxcpath"]]},
                "perf": {"enabled": False},
                "traffic": {"backend": "none"},
                "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
            }
        ),
        None,
    )
    agent.sample_cpu()
    found = {c.name: c for c in agent.containers}
    for c in _containers(testbed):
        assert cg.cores(found[c["name"]], 1024) == cpus
        assert cg.memory_limit(found[c["name"]], 1 << 50) == mem_mb * MIB


def test_cluster_document_is_written_and_valid(testbed: dict[str, Any]) -> None:
    path = Path(testbed["cluster_file"])
    assert path == tb.RUN_DIR / "clavis" / "cluster.json"
    written = Cluster.model_validate_json(path.read_text())
    carried = Cluster.model_validate(testbed["cluster"])
    assert written == carried  # every host is powered, so the states agree
    topo = testbed["topology"]
    host_cores = topo["containers_per_host"] * topo["cpus_per_container"]
    assert [h.name for h in written.hosts] == [h["name"] for h in testbed["hosts"]]
    for h, live in zip(written.hosts, testbed["hosts"], strict=True):
        assert (h.cores, h.rack, h.state) == (host_cores, f"r{live['rack']}", "up")
        assert h.power.idle_w == topo["power"]["idle_w"]
        assert h.power.peak_w == topo["power"]["idle_w"] + topo["power"]["per_core_w"] * host_cores


def test_exec_runs_in_the_shared_directory(testbed: dict[str, Any], tmp_path: Path) -> None:
    shared = Path(testbed["shared_dir"])
    # the caller's directory (tmp_path) exists on the machine but in no node
    assert tb.run([str(tb.CLI), "exec", "--", "pwd"], cwd=tmp_path).strip() == str(shared)
    sub = shared / "exec-test"
    sub.mkdir(exist_ok=True)
    assert tb.run([str(tb.CLI), "exec", "--", "pwd"], cwd=sub).strip() == str(sub)
    script = sub / "where.sh"
    script.write_text("#!/bin/sh\npwd\nhostname\n")
    out = tb.run([str(tb.CLI), "exec", "--", "sbatch", "--parsable", "exec-test/where.sh"],
                 cwd=tmp_path)  # fmt: skip
    job = out.strip().split(";")[0]
    assert re.fullmatch(r"\d+", job), out
    result = shared / f"slurm-{job}.out"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(_lines(result)) < 2:
        time.sleep(0.2)
    lines = _lines(result)
    assert len(lines) == 2 and lines[0] == str(shared), lines
    assert lines[1] in {c["name"] for c in _containers(testbed)}
    result.unlink()


def _lines(p: Path) -> list[str]:
    try:
        return p.read_text().split()
    except OSError:
        return []
