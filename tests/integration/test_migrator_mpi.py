"""Issue 14's acceptance on the testbed: a 2-node MPICH ring job keeps exchanging messages
while one of its node containers moves to a host in the other rack (CRIU
--tcp-established through LXC, the testbed's route-follow hook), and ends with the right
result; Slurm sees one uninterrupted run on the same node names, and the container runs
exactly once afterwards."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import tb
from .migrators import (
    Agents,
    lxc_state,
    no_images_left,
    running_on,
    send_home,
    step,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

HERE = Path(__file__).resolve().parent
HOOK = str(tb.REPO / "deploy" / "testbed" / "route-follow")
MOVED = "r1h1c2"  # 10.213.1.102 on r1h1: the batch host, which runs mpiexec
OTHER = "r1h2c1"
ROUNDS, BYTES, PAUSE_MS = 220, 65536, 100  # about 25 s of ring


def _rounds(f: Path) -> int:
    return len(f.read_text().split()) if f.exists() else 0


def _submit(shared: Path) -> tuple[str, Path, Path]:
    exe = shared / "mpi_ring"
    subprocess.run(
        ["mpicc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(HERE / "mpi_ring.c")],
        check=True, timeout=120,
    )  # fmt: skip
    progress, out = shared / "mpi-ring.progress", shared / "mpi-ring.out"
    progress.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    script = shared / "mpi-ring.sh"
    # -iface eth0: hydra uses the container's own rack address (TESTBED-NOTES); the
    # bound only keeps a hang from lasting until the time limit
    tb.nodes_usable([MOVED, OTHER])
    script.write_text(
        "#!/bin/bash\n"
        f"timeout 150 mpiexec -iface eth0 -n 2 {exe} {ROUNDS} {BYTES} {PAUSE_MS} {progress}\n"
        'echo "mpiexec_rc=$?"\n'
    )
    job = tb.slurm(
        ["sbatch", "--parsable", "-N", "2", "-n", "2", "-w", f"{MOVED},{OTHER}",
         "-D", str(shared), "-o", str(out), "-t", "5", str(script)]
    ).strip().split(";")[0]  # fmt: skip
    return job, progress, out


def test_an_mpi_ring_runs_on_while_its_node_moves_to_the_other_rack(
    testbed: dict[str, Any], tmp_path: Path
) -> None:
    a = Agents(testbed, tmp_path, ["r1h1", "r2h1"], cores=3, hook=HOOK)
    job = ""
    try:
        job, progress, out = _submit(Path(testbed["shared_dir"]))
        assert wait_until(lambda: _rounds(progress) >= 20, 60), (
            tb.slurm(["squeue"]),
            out.read_text() if out.exists() else "",
        )
        nodes = tb.slurm(["squeue", "-h", "-j", job, "-o", "%T %N"]).split()
        assert nodes[0] == "RUNNING", nodes

        a.send(step(testbed, (1, 0), MOVED, "r1h1", "r2h1"))
        done = a.wait("r1h1", "1:0")
        assert done["state"] == "done", a.explain(done, "r1h1", "r2h1")
        assert "network hook: 10.213.1.102 routed to rack 2" in done["message"], done
        # verified: the ranks' connections were established again on the target (the
        # ranks talk to each other and to their proxies over TCP), and slurmd answered
        tcp = re.search(r"restored on r2h1 \(RUNNING, .*?(\d+) TCP connections established "
                        r"again.*slurmd answered", done["message"])  # fmt: skip
        assert tcp and int(tcp.group(1)) >= 1, done["message"]
        before = _rounds(progress)
        assert before < ROUNDS, "the ring ended before the move: make it longer"
        # the container runs once, on the target, and the ring goes on across the racks
        assert running_on(testbed, MOVED) == ["r2h1"]
        assert wait_until(lambda: _rounds(progress) >= before + 20, 30), (
            "the ring stopped after the move",
            _rounds(progress),
            a.log("r2h1"),
        )
        assert tb.slurm(["squeue", "-h", "-j", job, "-o", "%T %N"]).split() == nodes
        for name in (MOVED, OTHER):
            node = tb.slurm(["scontrol", "show", "node", name])
            assert "DOWN" not in node and "DRAIN" not in node, node

        # the right result, exit 0, one uninterrupted run in accounting
        assert wait_until(lambda: out.exists() and "mpiexec_rc=" in out.read_text(), 120), (
            _rounds(progress),
            tb.slurm(["squeue"]),
        )
        text = out.read_text()
        total = ROUNDS * (ROUNDS + 1) // 2 * 3  # rank r adds (round + 1) * (r + 1)
        assert f"ring={total} expect={total} rounds={ROUNDS} bad=0 ok" in text, text
        assert re.search(r"^mpiexec_rc=0$", text, re.M), text
        assert [int(x) for x in progress.read_text().split()] == list(range(1, ROUNDS + 1))
        assert wait_until(
            lambda: (
                tb.slurm(["sacct", "-n", "-X", "-D", "-j", job, "-o", "State,ExitCode"]).split()
                == ["COMPLETED", "0:0"]
            ),
            60,
        ), tb.slurm(["sacct", "-D", "-j", job])  # -D: a requeued job would show twice

        # and home again: still once, on its own host, the core's route back on rack 1
        a.send(step(testbed, (2, 0), MOVED, "r2h1", "r1h1"))
        home = a.wait("r2h1", "2:0")
        assert home["state"] == "done", a.explain(home, "r2h1", "r1h1")
        assert running_on(testbed, MOVED) == ["r1h1"]
        assert "dev c-r1" in tb.run(["ip", "-n", "ctb-core", "route", "get", "10.213.1.102"])
        no_images_left(a, ["r1h1", "r2h1"])
    finally:
        if job:  # a ring that hung must not hold the nodes for the next tests
            subprocess.run([str(tb.CLI), "exec", "--", "scancel", job], check=False, timeout=30)
        a.stop()
        send_home(testbed, tmp_path, MOVED, "r1h1", HOOK)
        assert lxc_state(MOVED, "r1h1") == "RUNNING"
