"""clavis-migrator on the testbed: a Slurm node container with a running job moves to
another host of its rack through two real agents (LXC, CRIU 4.2.1, signed HTTP between
the hosts' netns) and keeps its IP, MAC, job and Slurm state; a transfer that fails on
the target (its disk full) leaves it running on the source;
a move the target has no cores for is refused."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import tb
from .migrators import Agents, attach, lxc_state, step

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

NODE = "r1h1c2"  # 10.213.1.102, on host r1h1; r1h2 is in the same rack


def _wait(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return bool(pred())


def _count(f: Path) -> int:
    return len(f.read_text().split()) if f.exists() else 0


HOOK = str(tb.REPO / "deploy" / "testbed" / "route-follow")


def _send_home(testbed: dict[str, Any], root: Path) -> None:
    """Leave the testbed as the other tests expect it: the node on its own host."""
    if lxc_state(NODE, "r1h1") == "RUNNING":
        return
    away = [h for h in ("r1h2", "r2h1") if lxc_state(NODE, h) == "RUNNING"]
    if not away:
        return
    a = Agents(testbed, root / "home", ["r1h1", away[0]], cores=8, hook=HOOK)
    try:
        a.send(step(testbed, (99, 0), NODE, away[0], "r1h1"))
        a.wait(away[0], "99:0")
    finally:
        a.stop()


@pytest.fixture
def agents(testbed: dict[str, Any], tmp_path: Path) -> Iterator[Agents]:
    # 3 cores each: a host with its own 2 nodes takes one more, not two
    a = Agents(testbed, tmp_path, ["r1h1", "r1h2"], cores=3)
    try:
        yield a
    finally:
        a.stop()
        _send_home(testbed, tmp_path)


def _start_job(testbed: dict[str, Any], lines: int) -> tuple[str, Path]:
    """A batch job on NODE writing one line every 0.1 s to a shared file."""
    counter = Path(testbed["shared_dir"]) / "migrator-job.count"
    counter.unlink(missing_ok=True)
    out = tb.slurm(
        ["sbatch", "--parsable", "-w", NODE, "-N", "1", "-o", "/tmp/migrator-job.out",
         "--wrap", f"for i in $(seq 1 {lines}); do echo $i >> {counter}; sleep 0.1; done"]
    )  # fmt: skip
    assert _wait(lambda: _count(counter) >= 10, 30), tb.slurm(["squeue"])
    return out.strip().split(";")[0], counter


def _job_ends_well(job: str, counter: Path, lines: int) -> None:
    assert _wait(lambda: _count(counter) >= lines, 90), _count(counter)
    assert counter.read_text().split() == [str(i) for i in range(1, lines + 1)]
    # one uninterrupted run in accounting, and the node takes new work
    assert _wait(
        lambda: (
            tb.slurm(["sacct", "-n", "-X", "-j", job, "-o", "State,ExitCode"]).split()
            == ["COMPLETED", "0:0"]
        ),
        60,
    ), tb.slurm(["sacct", "-j", job])
    assert _wait(lambda: tb.slurm(["sinfo", "-h", "-n", NODE, "-o", "%T"]).strip() == "idle", 30)
    assert tb.slurm(["srun", "-w", NODE, "-N", "1", "hostname"], timeout=60).strip() == NODE


def test_a_node_with_a_running_job_moves_within_its_rack_and_back(
    testbed: dict[str, Any], agents: Agents
) -> None:
    mac = attach(NODE, "r1h1", "cat /sys/class/net/eth0/address").strip()
    job, counter = _start_job(testbed, 250)  # about 25 s

    # capacity: r1h2 runs 2 one-core nodes of 3 cores, so it takes one (r1h1c2), and then
    # refuses another; nothing of the refused step touches its container
    first = agents.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
    assert first["state"] in ("accepted", "running", "done"), first
    done = agents.wait("r1h1", "1:0")
    assert done["state"] == "done", (done, agents.log("r1h1"), agents.log("r1h2"))
    assert "committed: r1h1c2 runs on r1h2" in done["message"]
    # status schema 2: what the move cost (about 4 MB of images here)
    assert 0 < done["frozen_s"] <= done["seconds"] and done["bytes_moved"] > 10**6
    assert agents.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))["state"] == "done"  # no rerun

    # the container runs on r1h2 only, on its bridge, with its IP and MAC
    assert lxc_state(NODE, "r1h2") == "RUNNING"
    assert lxc_state(NODE, "r1h1") == "STOPPED"
    assert "v-r1h1c2" in tb.run(["ip", "-n", "ctb-r1h2", "-o", "link", "show", "master", "br0"])
    assert "v-r1h1c2" not in tb.run(["ip", "-n", "ctb-r1h1", "-o", "link"])
    shown = attach(NODE, "r1h2", "ip -4 -o addr show dev eth0; cat /sys/class/net/eth0/address")
    assert "10.213.1.102/24" in shown and mac in shown
    # its cpuset too (a CRIU restore through lxc-checkpoint leaves every CPU)
    cpus = (Path("/sys/fs/cgroup/cpuset") / f"lxc.payload.{NODE}" / "cpuset.cpus").read_text()
    node_conf = (tb.RUN_DIR / "lxc" / NODE / "config").read_text()
    assert f"lxc.cgroup.cpuset.cpus = {cpus.strip()}\n" in node_conf, cpus
    # the job kept running through the move, on the same node, and Slurm saw nothing
    n = _count(counter)
    assert _wait(lambda: _count(counter) >= n + 10, 20), "the job stopped writing"
    squeue = tb.slurm(["squeue", "-h", "-j", job, "-o", "%T %N"]).split()
    assert squeue == ["RUNNING", NODE], squeue
    node = tb.slurm(["scontrol", "show", "node", NODE])
    assert "DOWN" not in node and "DRAIN" not in node, node

    refused = agents.send(step(testbed, (1, 1), "r1h1c1", "r1h1", "r1h2"))
    if refused["state"] not in ("failed",):
        refused = agents.wait("r1h1", "1:1")
    assert refused["state"] == "failed", refused
    assert "over its cores: 3 in use + 1 > 3" in refused["message"], refused
    assert lxc_state("r1h1c1", "r1h1") == "RUNNING"

    # a target that cannot take the images: its disk is full (a 256 KiB tmpfs)
    incoming = agents.state_dir("r1h1") / "incoming"
    tb.run(["mount", "-t", "tmpfs", "-o", "size=256k", "clavis-test-full", str(incoming)])
    try:
        agents.send(step(testbed, (2, 0), NODE, "r1h2", "r1h1"))
        back = agents.wait("r1h2", "2:0")
    finally:
        subprocess.run(["umount", str(incoming)], check=False, timeout=30)
    assert back["state"] == "rolled_back", (back, agents.log("r1h2"))
    assert "rolled back: restored on r1h2" in back["message"], back
    assert "No space left on device" in back["message"], back
    assert "failed 3 times" in back["message"], back
    assert lxc_state(NODE, "r1h2") == "RUNNING"
    assert lxc_state(NODE, "r1h1") == "STOPPED"
    n = _count(counter)
    assert _wait(lambda: _count(counter) >= n + 5, 20), "the job stopped after the rollback"

    # and home again, with the job still running or finished well
    agents.send(step(testbed, (3, 0), NODE, "r1h2", "r1h1"))
    home = agents.wait("r1h2", "3:0")
    assert home["state"] == "done", (home, agents.log("r1h2"), agents.log("r1h1"))
    assert lxc_state(NODE, "r1h1") == "RUNNING"
    assert lxc_state(NODE, "r1h2") == "STOPPED"
    assert _wait(lambda: _count(counter) >= 250, 60), _count(counter)
    assert counter.read_text().split() == [str(i) for i in range(1, 251)]
    # one uninterrupted run in accounting, and the node takes new work
    assert _wait(
        lambda: (
            tb.slurm(["sacct", "-n", "-X", "-j", job, "-o", "State,ExitCode"]).split()
            == ["COMPLETED", "0:0"]
        ),
        60,
    ), tb.slurm(["sacct", "-j", job])
    assert _wait(lambda: tb.slurm(["sinfo", "-h", "-n", NODE, "-o", "%T"]).strip() == "idle", 30)
    assert tb.slurm(["srun", "-w", NODE, "-N", "1", "hostname"], timeout=60).strip() == NODE
    # nothing left in either agent's image directories
    for host in ("r1h1", "r1h2"):
        for sub in ("outgoing", "incoming"):
            d = agents.state_dir(host) / sub
            assert not any(p.is_file() for p in d.rglob("*")), (host, sub)


def _reaches(netns: str, ip: str, port: int) -> bool:
    cp = subprocess.run(
        ["nsenter", f"--net=/run/netns/{netns}", "--", "python3", "-c",
         f"import socket; socket.create_connection(('{ip}', {port}), timeout=3).close()"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return cp.returncode == 0


def test_a_node_moves_to_another_rack_and_keeps_its_address(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    """The testbed's network hook (deploy/testbed/route-follow) routes the node's address
    to its new rack: the head and its home rack's nodes still reach it, the job runs on."""
    a = Agents(testbed, tmp_path, ["r1h1", "r2h1"], cores=3, hook=HOOK)
    try:
        job, counter = _start_job(testbed, 200)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r2h1"))
        done = a.wait("r1h1", "1:0")
        assert done["state"] == "done", (done, a.log("r1h1"), a.log("r2h1"))
        assert "network hook: 10.213.1.102 routed to rack 2" in done["message"], done
        assert lxc_state(NODE, "r2h1") == "RUNNING" and lxc_state(NODE, "r1h1") == "STOPPED"
        assert "dev c-r2" in tb.run(["ip", "-n", "ctb-core", "route", "get", "10.213.1.102"])
        # slurmd's port, from the head (routed) and from a node of the home rack (on-link,
        # answered by the core's proxy entry)
        assert _wait(lambda: _reaches("ctb-core", "10.213.1.102", 6818), 20)
        neighbour = attach(
            "r1h1c1", "r1h1",
            "python3 -c \"import socket; socket.create_connection(('10.213.1.102', 6818),"
            " timeout=5).close(); print('reached')\"",
        )  # fmt: skip
        assert neighbour.strip() == "reached"
        n = _count(counter)
        assert _wait(lambda: _count(counter) >= n + 10, 20), "the job stopped writing"
        assert tb.slurm(["squeue", "-h", "-j", job, "-o", "%T %N"]).split() == ["RUNNING", NODE]

        a.send(step(testbed, (2, 0), NODE, "r2h1", "r1h1"))
        home = a.wait("r2h1", "2:0")
        assert home["state"] == "done", (home, a.log("r2h1"), a.log("r1h1"))
        assert "10.213.1.102 at home in rack 1" in home["message"], home
        assert "dev c-r1" in tb.run(["ip", "-n", "ctb-core", "route", "get", "10.213.1.102"])
        _job_ends_well(job, counter, 200)
    finally:
        a.stop()
        _send_home(testbed, tmp_path)


def test_a_source_agent_killed_after_the_dump_rolls_back_when_restarted(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    """kill -9 of the source's agent once the container is dumped: the container is down
    until the agent restarts, which restores it on the source (the step is rolled_back);
    the target keeps nothing and the job runs on."""
    a = Agents(testbed, tmp_path, ["r1h2"], cores=3)
    try:
        a.start("r1h1", 3, pause_at="after-checkpoint")
        job, counter = _start_job(testbed, 120)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert _wait(lambda: "pause point after-checkpoint reached" in a.log("r1h1"), 60), a.log(
            "r1h1"
        )
        a.kill("r1h1")
        assert lxc_state(NODE, "r1h1") == "STOPPED" and lxc_state(NODE, "r1h2") == "STOPPED"
        a.start("r1h1", 3)
        doc = a.wait("r1h1", "1:0")
        assert doc["state"] == "rolled_back", (doc, a.log("r1h1"))
        assert "agent restarted during phase transfer" in doc["message"], doc
        assert "rolled back: restored on r1h1" in doc["message"], doc
        assert lxc_state(NODE, "r1h1") == "RUNNING" and lxc_state(NODE, "r1h2") == "STOPPED"
        # the same step id again: its status, no second run
        assert a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))["state"] == "rolled_back"
        for host in ("r1h1", "r1h2"):
            for sub in ("outgoing", "incoming"):
                d = a.state_dir(host) / sub
                assert not any(p.is_file() for p in d.rglob("*")), (host, sub)
        _job_ends_well(job, counter, 120)
    finally:
        a.stop()
        _send_home(testbed, tmp_path)


def test_a_target_agent_killed_mid_transfer_leaves_the_node_on_its_source(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    """kill -9 of the target's agent when the first image chunk arrives: the source's
    transfer fails, it restores the container at home; the target, restarted, drops the
    partial images."""
    a = Agents(testbed, tmp_path, ["r1h1"], cores=3)
    try:
        a.start("r1h2", 3, pause_at="target-receiving")
        job, counter = _start_job(testbed, 100)
        a.send(step(testbed, (1, 0), NODE, "r1h1", "r1h2"))
        assert _wait(lambda: "pause point target-receiving reached" in a.log("r1h2"), 60), a.log(
            "r1h2"
        )
        a.kill("r1h2")
        doc = a.wait("r1h1", "1:0")
        assert doc["state"] == "rolled_back", (doc, a.log("r1h1"))
        assert "transfer to r1h2 failed 3 times" in doc["message"], doc
        assert "rolled back: restored on r1h1" in doc["message"], doc
        assert lxc_state(NODE, "r1h1") == "RUNNING" and lxc_state(NODE, "r1h2") == "STOPPED"
        assert any(p.is_file() for p in (a.state_dir("r1h2") / "incoming").rglob("*"))
        a.start("r1h2", 3)
        for host in ("r1h1", "r1h2"):
            for sub in ("outgoing", "incoming"):
                d = a.state_dir(host) / sub
                assert not any(p.is_file() for p in d.rglob("*")), (host, sub)
        _job_ends_well(job, counter, 100)
    finally:
        a.stop()
        _send_home(testbed, tmp_path)
