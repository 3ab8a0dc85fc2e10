"""CRIU 4.2.1: a container with an established TCP connection is checkpointed and
restored in place; the connection carries on and the Slurm node comes back idle."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

HERE = Path(__file__).resolve().parent
PORT = 7411


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _count(log: Path) -> int:
    return sum(1 for ln in _lines(log) if ln.startswith("line "))


def _wait(pred: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


def test_criu_is_4_2_1_and_exposed(testbed: dict[str, Any]) -> None:
    criu = testbed["criu"]
    assert criu.startswith("/var/cache/clavis/") and Path(criu).is_file()
    assert "Version: 4.2.1" in tb.run([criu, "--version"])
    env = (Path(testbed["env_file"])).read_text()
    assert f"CLAVIS_CRIU={criu}\n" in env


def test_checkpoint_and_restore_keep_an_established_tcp_connection(
    testbed: dict[str, Any],
) -> None:
    shared = Path(testbed["shared_dir"])
    shutil.copy(HERE / "tcp_peer.py", shared / "tcp_peer.py")
    log = shared / "tcp-server.log"
    rc_file = shared / "tcp-client.rc"
    log.unlink(missing_ok=True)
    rc_file.unlink(missing_ok=True)
    host = next(h for h in testbed["hosts"] if h["name"] == "r1h1")
    container = "r1h1c2"
    # the peer lives outside the container, in the host's netns
    server = subprocess.Popen(
        ["nsenter", "--net=/run/netns/ctb-r1h1", "--", "python3", str(shared / "tcp_peer.py"),
         "server", host["ip"], str(PORT), str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert _wait(lambda: tb.run(["ss", "-N", "ctb-r1h1", "-ltn"]).count(f":{PORT}") > 0, 10)
        # The client's own fds must be the container's files: CRIU cannot dump an fd on
        # a host mount ("Can't lookup mount"), so the shell rebinds 0-2 before forking.
        tb.lxc_attach(
            container,
            "exec </dev/null >/dev/null 2>&1; setsid -f sh -c "
            f"'python3 {shared}/tcp_peer.py client {host['ip']} {PORT} 12; echo $? > {rc_file}'",
        )
        assert _wait(lambda: _count(log) >= 10, 10), _lines(log)

        tb.tb("checkpoint", container)
        frozen = _count(log)
        time.sleep(1.0)
        assert _count(log) == frozen  # the client is really gone while dumped
        assert tb.status()["hosts"][0]["containers"][1]["lxc"] == "STOPPED"

        tb.tb("restore", container)
        assert _wait(lambda: _count(log) >= frozen + 10, 10), (frozen, _lines(log)[-3:])
        # same connection: the server accepted exactly one
        assert sum(1 for ln in _lines(log) if ln.startswith("conn ")) == 1
        # the client saw every echo right and exited 0 at its deadline
        assert _wait(rc_file.exists, 20)
        assert rc_file.read_text().strip() == "0"
    finally:
        server.kill()
        server.wait(timeout=10)

    shown = tb.lxc_attach(container, "ip -4 -o addr show dev eth0")
    assert "10.213.1.102/24" in shown
    # the restored node's slurmd is back: the node is idle and runs a job
    assert _wait(
        lambda: tb.slurm(["sinfo", "-h", "-n", container, "-o", "%T"]).strip() == "idle", 30
    )
    # and it has its cpuset back (a restore alone leaves it at every CPU)
    want = tb.status()["hosts"][0]["containers"][1]["cpuset"]
    text = Path(f"/sys/fs/cgroup/cpuset/lxc.payload.{container}/cpuset.cpus").read_text()
    got = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        got |= set(range(int(lo), int(hi or lo) + 1))
    assert got == set(want), (text, want)
    out = tb.slurm(["srun", "-w", container, "-N", "1", "hostname"], timeout=60)
    assert out.strip() == container
