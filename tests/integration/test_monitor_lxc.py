"""The monitor's container discovery on the testbed's real LXC containers: every Slurm
node is found as an LXC container with its address and its cgroups (which hold its
init), and a running Slurm job's processes are attributed to the container it runs in
by the cgroup scan alone (no SPANK registration), the way the report names its job."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from clavis_monitor import containers as cg
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1 = ("cpuacct", "memory", "cpuset", "perf_event")


def _nodes(testbed: dict[str, Any]) -> dict[str, str]:
    """Container (= Slurm node) name -> its address."""
    return {c["name"]: c["ip"] for h in testbed["hosts"] for c in h["containers"]}


def _agent(testbed: dict[str, Any], tmp_path: Path) -> Agent:
    cfg = parse(
        {
            "host": "r1h1",
            "containers": {"lxc_paths": [testbed["lxcpath"]]},
            "perf": {"enabled": False},
            "traffic": {"backend": "none"},
            "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
        }
    )
    return Agent(cfg, None)


def _init_pid(name: str, lxcpath: str) -> int:
    """The container's PID 1 as the host sees it (lxc-info from the host's netns)."""
    out = tb.run(
        ["nsenter", f"--net=/run/netns/ctb-{tb.host_of(name)}", "--",
         "lxc-info", "-n", name, "-P", lxcpath, "-p", "-H"]
    )  # fmt: skip
    return int(out.strip())


def _pids_with_cmdline(argv: list[str]) -> list[int]:
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes() == want:
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def test_every_testbed_container_is_found_with_its_cgroups(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    nodes = _nodes(testbed)
    agent = _agent(testbed, tmp_path)
    agent.sample_cpu()  # discovery
    found = {c.name: c for c in agent.containers}
    assert set(nodes) <= set(found), sorted(set(nodes) - set(found))
    expected_ctl = {h for h in V1 if (CGROUP_ROOT / h / "tasks").exists()}
    containers = list(found.values())
    for name, ip in nodes.items():
        c = found[name]
        assert c.source == "lxc" and c.addresses == (ip,), c
        assert expected_ctl <= set(c.cgroups), (name, sorted(c.cgroups))
        for d in c.cgroups.values():
            assert d.name == f"lxc.payload.{name}" and d.is_dir(), d
        init = _init_pid(name, testbed["lxcpath"])
        assert cg.pid_container(init, containers, CGROUP_ROOT) == name
        assert cg.cpu_ns(c) > 0  # cinit, munged and slurmd have run in it
    time.sleep(0.3)
    agent.sample_cpu()
    report = agent.build_report()
    assert set(nodes) <= {s.name for s in report.containers}


def test_a_slurm_job_is_attributed_to_its_container_by_the_cgroup_scan(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    nodes = sorted(_nodes(testbed))
    # two jobs on containers of different racks, each with its own recognisable task
    placed = {nodes[0]: "3617", nodes[-1]: "3618"}
    jobs: dict[str, int] = {}
    try:
        for node, secs in placed.items():
            out = tb.slurm(["sbatch", "-w", node, "-o", "/dev/null", "-J", "monlxc",
                            "--wrap", f"exec sleep {secs}"])  # fmt: skip
            m = re.search(r"Submitted batch job (\d+)", out)
            assert m, out
            jobs[node] = int(m.group(1))
        tasks: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(tasks) < len(placed):
            for node, secs in placed.items():
                pids = _pids_with_cmdline(["sleep", secs])
                if len(pids) == 1:
                    tasks[node] = pids[0]
            time.sleep(0.2)
        assert len(tasks) == len(placed), (tasks, tb.slurm(["squeue"]))

        agent = _agent(testbed, tmp_path)
        agent.sample_cpu()
        found = {c.name: c for c in agent.containers}
        containers = list(found.values())
        for node, pid in tasks.items():
            job = jobs[node]
            assert cg.pid_container(pid, containers, CGROUP_ROOT) == node
            by_job = cg.slurm_tasks(found[node])
            assert pid in by_job.get(job, set()), (node, job, by_job)
            # the batch step's slurmstepd is one of the job's processes there
            stepd = [p for p in by_job[job]
                     if Path(f"/proc/{p}/cmdline").read_bytes().startswith(
                         f"slurmstepd: [{job}.batch]".encode())]  # fmt: skip
            assert len(stepd) == 1, by_job
            assert job in cg.jobs_in(found[node])
            for other in nodes:
                if other != node:
                    assert job not in cg.jobs_in(found[other]), (job, other)
        assert agent.registry.steps() == []  # nothing registered: the fallback named them
        time.sleep(0.3)
        agent.sample_cpu()
        report = {s.name: s for s in agent.build_report().containers}
        for node, job in jobs.items():
            assert report[node].job == str(job), report[node]
    finally:
        if jobs:
            tb.slurm(["scancel", *(str(j) for j in jobs.values())])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not any(_pids_with_cmdline(["sleep", s]) for s in placed.values()):
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the test's jobs did not end after scancel")
