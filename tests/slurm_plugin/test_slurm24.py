"""Both plugins built against Slurm 24.11 (Debian 13's, in a debootstrap root made by
slurm-plugin/compat/slurm24-root.sh) and run there by a private 4-node cluster: the
select plugin loads over cons_tres, follows advice and falls back to cons_tres's
placements without usable advice; the SPANK plugin registers the job's steps with the
monitor's real registry server and refuses a bad --clavis-class at submission."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_contracts.registration import DeregisterStep, RegisterStep
from clavis_monitor.registry import RegistrationServer

from .minicluster import REPO, MiniCluster, slurm_available
from .registry import RecordingRegistry
from .test_select_cluster import SEQUENCE, advice_doc

pytestmark = pytest.mark.skipif(
    not slurm_available(), reason="needs root (debootstrap, chroot) and Slurm's daemons"
)

COMPAT = REPO / "slurm-plugin" / "compat"
BATCH_STEP = 4294967291


@pytest.fixture(scope="module")
def root24() -> Iterator[Path]:
    """The 24.11 root with both plugins built in it (/clavis-build), and /proc, /sys,
    /dev mounted in it while the module runs."""
    cp = subprocess.run(
        [str(COMPAT / "build24.sh")], capture_output=True, text=True, timeout=1800, check=False
    )
    assert cp.returncode == 0, cp.stderr[-4000:]
    root = Path(cp.stdout.strip()).parent
    version = subprocess.run(
        ["chroot", str(root), "slurmctld", "-V"], capture_output=True, text=True, check=True
    ).stdout
    assert version.split()[1].startswith("24.11."), version
    mounted: list[Path] = []
    try:
        for d in ("proc", "sys", "dev"):
            subprocess.run(["mount", "--bind", f"/{d}", str(root / d)], check=True)
            mounted.append(root / d)
        yield root
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", str(m)], check=False)


@pytest.fixture
def workdir(root24: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir=root24 / "tmp", prefix="clavis-mc-") as d:
        yield Path(d)


def start(root24: Path, workdir: Path, name: str, select: str) -> MiniCluster:
    c = MiniCluster(workdir / name, select, chroot=root24, build=Path("/clavis-build"))
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    return c


def test_select_over_cons_tres_on_24_11(root24: Path, workdir: Path) -> None:
    stock = start(root24, workdir, "stock", "select/cons_tres")
    try:
        want = [stock.placed(stock.submit(*opts)) for opts in SEQUENCE]
    finally:
        stock.stop()
    c = start(root24, workdir, "clavis", "select/clavis")
    try:
        assert "select/clavis loaded (advice " in c.log()
        for data in (None, b"{corrupt"):
            if data is not None:
                c.put_advice(data)
            got = [c.placed(c.submit(*opts)) for opts in SEQUENCE]
            c.cancel_all()
            assert got == want, (data, got)
        c.put_advice(json.dumps(advice_doc({"n1": "devil"})))
        job = c.submit("-N1", "--clavis-class=devil")
        assert c.placed(job) in ("n3", "n4")
        c.cancel_all()
        # No hint: the application remembered as a devil (advice schema 2), by the job's
        # user id and name as 24.11's job record has them.
        doc = {**advice_doc({"n1": "devil"}), "schema_version": 2, "apps": [
            {"app": f"{os.getuid()}:stream.sh", "app_class": "devil", "jobs_seen": 1}]}  # fmt: skip
        c.put_advice(json.dumps(doc))
        assert c.placed(c.submit("-N1", "--job-name=stream.sh")) in ("n3", "n4")
        c.cancel_all()
        c.put_advice(b"[" * 100_000)
        assert c.placed(c.submit("-N1", "--clavis-class=devil")) == "n1"
        assert c.ctld_alive()
    finally:
        c.stop()


def test_spank_on_24_11(root24: Path, workdir: Path) -> None:
    c = start(root24, workdir, "spank", "select/cons_tres")
    sock = workdir / "monitor.sock"
    registry = RecordingRegistry()
    server = RegistrationServer(sock, registry, timeout_s=2.0).start()
    try:
        c.use_monitor(sock)
        bad = c.run(["sbatch", "--clavis-class=angel", "--wrap", "true"], check=False)
        assert bad.returncode != 0
        assert "invalid --clavis-class='angel': must be auto, devil or turtle" in bad.stderr
        out = c.run(
            ["sbatch", "--parsable", "--wait", "-o", "/dev/null", "--clavis-class=turtle",
             "--wrap", "srun -n1 true"],
        )  # fmt: skip
        job = int(out.stdout.strip().split(";")[0])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (
            sum(isinstance(r, DeregisterStep) for r in registry.requests) < 2
        ):
            time.sleep(0.1)
    finally:
        server.close()
        c.stop()
    assert registry.refused == 0
    regs = {r.step_id: r for r in registry.requests if isinstance(r, RegisterStep)}
    assert set(regs) == {BATCH_STEP, 0}, registry.requests
    for r in regs.values():
        assert (r.node, r.job_id, r.class_hint) == ("n1", job, "turtle")
    assert registry.steps() == []
