"""Container discovery from real cgroups, their CPU use, the job fallback from Slurm's
cgroups, and a container vanishing mid-sample."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_monitor import containers as cg
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse

from .cgroups import CgroupSet

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups)")


def test_parsers() -> None:
    assert cg.cpuset_count("0-3,8,10-11\n") == 7
    assert cg.cpuset_count("") == 0
    conf = "lxc.net.0.type = veth\nlxc.net.0.ipv4.address = 10.0.0.5/24\n"
    assert cg.lxc_addresses(conf) == ("10.0.0.5",)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def cs() -> Iterator[CgroupSet]:
    s = CgroupSet(["busy", "quiet", "gone"]).create()
    try:
        yield s
    finally:
        s.remove()


def _agent(cs: CgroupSet, tmp: Path) -> Agent:
    lxc = tmp / "lxc" / "busy"
    lxc.mkdir(parents=True)
    (lxc / "config").write_text("lxc.net.0.ipv4.address = 10.9.9.9/24\n")
    cfg = parse({
        "host": "h1",
        "containers": {"scan_prefixes": [cs.prefix], "lxc_paths": [str(tmp / "lxc")],
                       "include": ["busy", "quiet", "gone"]},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp / "none")},
    })  # fmt: skip
    return Agent(cfg, None)


def test_cpu_use_jobs_and_a_vanishing_container(cs: CgroupSet, tmp_path: Path) -> None:
    burner = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        cs.enter(burner.pid, "busy")
        (cs.path("cpuacct", "quiet") / "slurm").mkdir()
        (cs.path("cpuacct", "quiet") / "slurm" / "job_77").mkdir()
        agent = _agent(cs, tmp_path)
        cpu0, t0 = _cpu_s(burner.pid), time.monotonic()
        agent.sample_cpu()
        found = {c.name: c for c in agent.containers}
        assert set(found) == {"busy", "quiet", "gone"}
        assert (found["busy"].source, found["busy"].addresses) == ("lxc", ("10.9.9.9",))
        assert found["quiet"].source == "cgroup"
        time.sleep(1.0)
        cs.remove_one("gone")  # vanishes between discovery and the next sample
        agent.sample_cpu()
        burned = (_cpu_s(burner.pid) - cpu0) / (time.monotonic() - t0)
        report = agent.build_report()
    finally:
        burner.kill()
        burner.wait(timeout=10)
        for d in (
            cs.path("cpuacct", "quiet") / "slurm" / "job_77",
            cs.path("cpuacct", "quiet") / "slurm",
        ):
            d.rmdir()
    got = {c.name: c for c in report.containers}
    assert set(got) == {"busy", "quiet"}
    # a spinning shell: what it got of the shared cores, as /proc counts it
    assert burned > 0.1 and got["busy"].busy_cores == pytest.approx(burned, abs=0.1)
    assert got["quiet"].busy_cores < 0.05
    assert got["quiet"].job == "77"  # from Slurm's cgroup, no registration
    assert got["busy"].job is None
    assert agent.vanished == 1
    assert all(c.intensity_source == "unsupported" for c in report.containers)


def test_cpu_times_reread_an_open_file_and_see_the_cgroup_go(cs: CgroupSet) -> None:
    times = cg.CpuTimes()
    found = {c.name: c for c in cg.discover(parse({"containers": {
        "scan_prefixes": [cs.prefix], "lxc_paths": []}}).containers)}  # fmt: skip
    fds = len(os.listdir("/proc/self/fd"))
    burner = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        cs.enter(burner.pid, "busy")
        first = times.read(found["busy"])
        time.sleep(0.3)
        second = times.read(found["busy"])
        assert second > first  # the same open file, read again from its start
        assert second <= cg.cpu_ns(found["busy"])  # a fresh open reads no less
        assert times.read(found["quiet"]) == cg.cpu_ns(found["quiet"])
        assert len(os.listdir("/proc/self/fd")) == fds + 2  # one open file per container
    finally:
        burner.kill()
        burner.wait(timeout=10)
    times.read(found["gone"])
    cs.remove_one("gone")
    with pytest.raises(cg.VanishedError):
        times.read(found["gone"])  # ENODEV on the file it had open
    times.close()
    assert len(os.listdir("/proc/self/fd")) == fds


# a stand-in slurmstepd: the title Slurm's gives itself, comm "slurmstepd", one task
STEPD = (
    "import subprocess,sys; open('/proc/self/comm','w').write('slurmstepd');"
    "t=subprocess.Popen(['sleep','300']); print(t.pid, flush=True); t.wait()"
)


def test_a_job_found_by_its_slurmstepd_with_its_tasks(cs: CgroupSet) -> None:
    """proctrack/linuxproc makes no job cgroups: the job is its slurmstepd in the
    container's cgroups, and the job's tasks are that slurmstepd's descendants."""
    found = {c.name: c for c in cg.discover(parse({"containers": {
        "scan_prefixes": [cs.prefix], "lxc_paths": []}}).containers)}  # fmt: skip
    stranger = subprocess.Popen(["sleep", "300"])  # in the container, no job's
    cs.enter(stranger.pid, "busy")
    # waits for a line, so it is in the container's cgroups before it starts its task
    stepd = subprocess.Popen(
        ["bash", "-c", f'read go; exec -a "slurmstepd: [4242.batch]" {sys.executable} -c "$0"',
         STEPD],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert stepd.stdin is not None and stepd.stdout is not None
        cs.enter(stepd.pid, "busy")
        stepd.stdin.write("go\n")
        stepd.stdin.close()
        task = int(stepd.stdout.readline())
        assert cg.slurm_tasks(found["busy"]) == {4242: {stepd.pid, task}}
        assert cg.jobs_in(found["busy"]) == [4242]
        assert cg.jobs_in(found["quiet"]) == []
        containers = list(found.values())
        assert cg.pid_container(task, containers, cg_root()) == "busy"
        assert cg.pid_container(os.getpid(), containers, cg_root()) is None
    finally:
        for p in (stepd, stranger):
            p.kill()
            p.wait(timeout=10)
        if stepd.stdout is not None:
            stepd.stdout.close()


def cg_root() -> Path:
    return Path("/sys/fs/cgroup")


def test_include_file_is_read_at_each_discovery(cs: CgroupSet, tmp_path: Path) -> None:
    """A container that moves to another host leaves this monitor's include file: the
    next discovery must drop it, without a restart (the testbed's migrations)."""
    listed = tmp_path / "containers.txt"
    cfg = parse({
        "host": "h1",
        "containers": {"scan_prefixes": [cs.prefix], "lxc_paths": [],
                       "include": ["*"], "include_file": str(listed)},
    }).containers  # fmt: skip
    assert cg.discover(cfg) == []  # no file yet: nothing (not `include`)
    listed.write_text("# moved here\nbusy\n\nqu*  # a pattern\n")
    assert [c.name for c in cg.discover(cfg)] == ["busy", "quiet"]
    listed.write_text("gone\n")
    assert [c.name for c in cg.discover(cfg)] == ["gone"]
