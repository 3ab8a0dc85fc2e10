"""MPICH across containers in different racks, submitted with plain sbatch.

The job's traffic must cross the tbf-limited core link (tc and iptables counters
grow by at least the bytes the ping-pong moved) and be paced by it; a same-rack job
must not touch the core link. Every job must end with mpiexec's exit status 0: the
testbed preloads an MPI_Finalize wrapper that keeps MPICH 4.0.2 from deadlocking in
MPI_Finalize (deploy/testbed/mpi/finalize_barrier.c; without it jobs of 4 and 8
ranks over both racks hung in about half the runs).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

HERE = Path(__file__).resolve().parent
MSG_BYTES = 1 << 20
ROUNDS = 8  # 8 MiB each way
# a hang is a failure; the bound only keeps it from lasting until the job's time limit
FINALIZE_BOUND_S = 60


@pytest.fixture(scope="module")
def pingpong(testbed: dict[str, Any]) -> Path:
    shared = Path(testbed["shared_dir"])
    exe = shared / "mpi_pingpong"
    subprocess.run(
        [
            "mpicc",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            str(exe),
            str(HERE / "mpi_pingpong.c"),
        ],
        check=True,
        timeout=120,
    )
    return exe


def _submit(exe: Path, nodes: list[str], tag: str) -> str:
    shared = exe.parent
    script = shared / f"job-{tag}.sh"
    script.write_text(
        "#!/bin/bash\n"
        # -iface eth0: hydra must use the container's own rack address (TESTBED-NOTES)
        f"timeout {FINALIZE_BOUND_S} mpiexec -iface eth0 -n {len(nodes)} "
        f"{exe} {MSG_BYTES} {ROUNDS}\n"
        'echo "mpiexec_rc=$?"\n'
        # the task prolog put the MPI_Finalize wrapper here (deploy/testbed/ctb/mpi.py)
        'echo "preload=$LD_PRELOAD"\n'
    )
    out = shared / f"job-{tag}.out"
    out.unlink(missing_ok=True)
    tb.nodes_usable(nodes)
    tb.slurm(
        ["sbatch", "--wait", "-N", str(len(nodes)), "-n", str(len(nodes)),
         "-w", ",".join(nodes), "-D", str(shared), "-o", str(out), "-t", "5", str(script)],
        timeout=300,
    )  # fmt: skip
    return out.read_text()


def _check_exit(text: str) -> None:
    """mpiexec exited 0 (124 would be the bound stopping a hang in MPI_Finalize)."""
    m = re.search(r"mpiexec_rc=(\d+)", text)
    assert m, text
    assert m.group(1) == "0", text
    assert "preload=/run/clavis-testbed/etc/mpi-finalize-barrier.so" in text, text
    # the wrapper says so when its barrier could not be done
    assert "finalize_barrier:" not in text, text


def _core_counters() -> dict[str, int]:
    return {
        "r1->core": tb.tc_sent_bytes("ctb-r1", "core"),
        "core->r2": tb.tc_sent_bytes("ctb-core", "c-r2"),
        "r2->core": tb.tc_sent_bytes("ctb-r2", "core"),
        "core->r1": tb.tc_sent_bytes("ctb-core", "c-r1"),
        "ipt r1->r2": tb.xrack_bytes(1, 2),
        "ipt r2->r1": tb.xrack_bytes(2, 1),
    }


def test_cross_rack_job_is_correct_and_crosses_the_slow_link(
    testbed: dict[str, Any], pingpong: Path
) -> None:
    # two hosts in different racks
    nodes = ["r1h1c1", "r2h1c1"]
    before = _core_counters()
    text = _submit(pingpong, nodes, "xrack")
    after = _core_counters()
    m = re.search(r"ring=(\d+) expect=(\d+) pingpong_bytes=(\d+) seconds=([\d.]+) ok", text)
    assert m, text
    _check_exit(text)
    assert int(m.group(1)) == int(m.group(2)) == 0 + 1
    for n in nodes:
        assert f"on {n}\n" in text, text
    one_way = MSG_BYTES * ROUNDS
    delta = {k: after[k] - before[k] for k in before}
    for key, grown in delta.items():
        assert grown >= one_way, (key, delta)
    # tbf paces the transfer: 2 x 8 MiB at the core rate cannot be faster than the link
    rate_bytes_s = testbed["topology"]["core_rate_mbit"] * 1e6 / 8
    assert float(m.group(4)) >= 0.8 * (2 * one_way) / rate_bytes_s, (m.group(4), rate_bytes_s)


def test_same_rack_job_stays_off_the_core_link(testbed: dict[str, Any], pingpong: Path) -> None:
    before = _core_counters()
    text = _submit(pingpong, ["r1h1c1", "r1h2c1"], "rack1")
    after = _core_counters()
    assert re.search(r"ring=1 expect=1 .* ok", text), text
    _check_exit(text)
    # only Slurm's own control traffic to the head crosses: far below one message
    assert after["ipt r1->r2"] - before["ipt r1->r2"] < MSG_BYTES // 4
    assert after["core->r2"] - before["core->r2"] < MSG_BYTES // 4


@pytest.mark.parametrize("run", range(3))
def test_every_node_job_over_both_racks_exits_0(
    testbed: dict[str, Any], pingpong: Path, run: int
) -> None:
    """A job on every node (8 ranks, 4 hosts, 2 racks): a ring over both racks, the
    ping-pong between r1h1c1 and r2h2c2, and a clean MPI_Finalize each time. The ring
    leaves most pairs of ranks without a message between them, which is one of the two
    ways MPICH 4.0.2 hung in MPI_Finalize here."""
    nodes = [c["name"] for h in testbed["hosts"] for c in h["containers"]]
    text = _submit(pingpong, nodes, f"all{run}")
    n = len(nodes)
    assert re.search(rf"ring={n * (n - 1) // 2} expect={n * (n - 1) // 2} .* ok", text), text
    for name in nodes:
        assert f"on {name}\n" in text, text
    _check_exit(text)
