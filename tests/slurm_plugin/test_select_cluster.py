"""select_clavis.so loaded by a real slurmctld (a private 4-node cluster, minicluster.py),
wrapping select/cons_tres: with no, corrupt, stale or huge advice it places a job
sequence exactly as cons_tres does; with advice, a devil-hinted job avoids the hosts
running devils and a 2-node job stays in one rack; when the advice would leave the job
waiting, it runs where cons_tres puts it; garbage of every kind leaves slurmctld running."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from .minicluster import BUILD, REPO, MiniCluster, slurm_available

pytestmark = pytest.mark.skipif(
    not slurm_available(), reason="needs root and Slurm's daemons (make testbed-install)"
)

# host h1 = n1, n2 (rack r1); host h2 = n3, n4 (rack r2) unless a test says otherwise
TOPOLOGY = {"n1": ("h1", "r1"), "n2": ("h1", "r1"), "n3": ("h2", "r2"), "n4": ("h2", "r2")}
# 1-node, 2-node, then 1-node jobs, one hinted devil: holds all four nodes at the end
SEQUENCE: list[tuple[str, ...]] = [("-N1",), ("-N2",), ("-N1", "--clavis-class=devil")]


def advice_doc(
    classes: dict[str, str],
    topology: dict[str, tuple[str, str]] = TOPOLOGY,
    age_s: float = 0.0,
) -> dict[str, object]:
    """An advice file of schema v1; hosts with a devil node are 'ok', others devil-free."""
    devil_hosts = {topology[n][0] for n, c in classes.items() if c == "devil"}
    generated = datetime.now(UTC) - timedelta(seconds=age_s)
    return {
        "schema_version": 1,
        "kind": "clavis.advice",
        "generated": generated.isoformat().replace("+00:00", "Z"),
        "valid_s": 180.0,
        "nodes": [
            {
                "node": n,
                "host": h,
                "rack": r,
                "contention": "ok" if h in devil_hosts else "devil-free",
                "node_class": classes.get(n, "unknown"),
            }
            for n, (h, r) in topology.items()
        ],
    }


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    cp = subprocess.run(
        ["make", "-C", str(REPO / "slurm-plugin")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert (BUILD / "select_clavis.so").is_file()


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    return tmp_path


def start(root: Path, select: str, advice_max_bytes: int | None = None) -> MiniCluster:
    c = MiniCluster(root, select)
    try:
        c.start(advice_max_bytes)
    except BaseException:
        c.stop()
        raise
    return c


@pytest.fixture
def clavis(tmp_path: Path) -> Iterator[MiniCluster]:
    c = start(tmp_path / "clavis", "select/clavis")
    try:
        yield c
    finally:
        c.stop()


def run_sequence(c: MiniCluster) -> list[str]:
    placed = []
    for opts in SEQUENCE:
        placed.append(c.placed(c.submit(*opts)))
    c.cancel_all()
    return placed


def test_plugin_is_loaded_over_cons_tres(clavis: MiniCluster) -> None:
    log = clavis.log()
    assert "select/clavis loaded (advice " in log
    assert "select/cons_tres loaded" in log
    out = clavis.run(["scontrol", "show", "config"]).stdout
    assert "select/clavis" in out


def test_without_usable_advice_placement_equals_cons_tres(tmp_path: Path) -> None:
    stock = start(tmp_path / "stock", "select/cons_tres")
    try:
        want = run_sequence(stock)
    finally:
        stock.stop()
    assert want == ["n1", "n[2-3]", "n4"], want
    variants = {
        "missing": None,
        "corrupt": b'{"schema_version":1,"nodes":[{"node":"n1"',
        "stale": json.dumps(advice_doc({"n1": "devil"}, age_s=3600)).encode(),
        # a year ahead, valid for ever: was taken as fresh (issue 15 item 10)
        "valid-for-ever": json.dumps(
            {**advice_doc({"n1": "devil"}, age_s=-365 * 86400), "valid_s": 1e12}
        ).encode(),
        "huge": json.dumps(advice_doc({"n1": "devil"})).encode() + b" " * 8192,
    }
    reasons = {"missing": "missing", "stale": "stale", "valid-for-ever": "valid_s",
               "huge": "larger than its size limit", "corrupt": ""}  # fmt: skip
    for name, data in variants.items():
        c = start(tmp_path / name, "select/clavis", advice_max_bytes=4096)
        try:
            if data is not None:
                c.put_advice(data)
            got = run_sequence(c)
            assert c.ctld_alive()
            log = c.log()
        finally:
            c.stop()
        assert got == want, (name, got)
        assert f"select/clavis: advice {c.advice} {reasons[name]}" in log, name
        assert "placing as cons_tres" in log, name


def test_advice_is_read_by_the_plugins_thread_not_by_job_tests(clavis: MiniCluster) -> None:
    """A new file is read, parsed and logged with no job submitted (the watcher thread,
    within a fraction of a second), and job tests never read it again: the file's line
    appears once, however many jobs are tested."""
    t0 = time.monotonic()
    clavis.put_advice(json.dumps(advice_doc({"n1": "devil"})))
    took = time.monotonic() - t0
    assert clavis.run(["squeue", "-h"]).stdout.strip() == ""
    log = clavis.log()
    assert f"select/clavis: advice {clavis.advice}: 4 nodes" in log
    assert took < 5.0, took  # polled every 0.2 s; slack for a loaded machine
    reads = log.count(f"select/clavis: file {clavis.advice} changed (")
    for _ in range(3):
        assert clavis.placed(clavis.submit("-N1", "--clavis-class=devil")) in ("n3", "n4")
        clavis.cancel_all()
    assert clavis.log().count(f"select/clavis: file {clavis.advice} changed (") == reads


def test_devil_avoids_hosts_running_a_devil(clavis: MiniCluster) -> None:
    clavis.put_advice(json.dumps(advice_doc({"n1": "devil"})))
    first = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(first) in ("n3", "n4")  # stock: n1
    # not hinted: as cons_tres (the smallest free block, n4 or n1)
    other = clavis.submit("-N1")
    assert clavis.placed(other) != "PENDING"
    assert "placed on advised nodes" in clavis.log()


def test_an_application_remembered_as_a_devil_avoids_devil_hosts(clavis: MiniCluster) -> None:
    """No --clavis-class: the job's user id and name find its application's class in the
    advice (schema v2); a hint still overrides it; other applications place as stock."""
    uid = os.getuid()  # sbatch runs as this user here
    doc = {**advice_doc({"n1": "devil"}), "schema_version": 2, "apps": [
        {"app": f"{uid}:stream.sh", "app_class": "devil", "jobs_seen": 2},
        {"app": f"{uid}:calm.sh", "app_class": "turtle", "jobs_seen": 5},
    ]}  # fmt: skip
    clavis.put_advice(json.dumps(doc))
    job = clavis.submit("-N1", "--job-name=stream.sh")
    assert clavis.placed(job) in ("n3", "n4")  # stock: n1
    assert f"application {uid}:stream.sh remembered as devil" in clavis.log()
    clavis.cancel_all()
    for opts in (("--job-name=stream.sh", "--clavis-class=turtle"), ("--job-name=calm.sh",),
                 ("--job-name=other.sh",)):  # fmt: skip
        job = clavis.submit("-N1", *opts)
        assert clavis.placed(job) == "n1", opts  # where cons_tres puts it
        clavis.cancel_all()
    # The same file as an older clavisd wrote it (v1, no applications): as stock.
    clavis.put_advice(json.dumps(advice_doc({"n1": "devil"})))
    job = clavis.submit("-N1", "--job-name=stream.sh")
    assert clavis.placed(job) == "n1"


def test_devil_prefers_devil_free_hosts_to_hosts_of_unknown_contention(
    clavis: MiniCluster,
) -> None:
    """One node per host: h1 runs a devil, h2 holds a container clavisd cannot class
    (contention unknown), h3 and h4 are devil-free. A devil job goes to h3 or h4; when
    they are busy, to h2 rather than waiting (unknown is not avoided at any cost)."""
    hosts = {"n1": ("h1", "r1"), "n2": ("h2", "r1"), "n3": ("h3", "r2"), "n4": ("h4", "r2")}
    doc = json.loads(json.dumps(advice_doc({"n1": "devil"}, topology=hosts)))
    doc["nodes"] = [{**n, "contention": "unknown"} if n["node"] == "n2" else n
                    for n in doc["nodes"]]  # fmt: skip
    clavis.put_advice(json.dumps(doc))
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job) in ("n3", "n4")  # stock: n1; without the preference: n2
    assert "placed on advised nodes (devil-free hosts)" in clavis.log()
    clavis.cancel_all()
    busy = [clavis.submit("-N1", "-w", n) for n in ("n3", "n4")]
    assert [clavis.placed(j) for j in busy] == ["n3", "n4"]
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job, timeout=10) == "n2"


def test_devil_runs_where_stock_would_when_advice_leaves_no_room(clavis: MiniCluster) -> None:
    clavis.put_advice(json.dumps(advice_doc({"n1": "devil", "n3": "devil"})))
    # every host runs a devil: the advised set is empty, the job runs at once anyway
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job, timeout=10) == "n1"
    clavis.cancel_all()
    # devil-free nodes busy: the devil job must not wait for them
    clavis.put_advice(json.dumps(advice_doc({"n1": "devil"})))
    busy = [clavis.submit("-N1", "-w", n) for n in ("n3", "n4")]
    assert [clavis.placed(j) for j in busy] == ["n3", "n4"]
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job, timeout=10) in ("n1", "n2")


def test_two_node_job_stays_in_one_rack(clavis: MiniCluster) -> None:
    racks = {"n1": ("h1", "r1"), "n2": ("h2", "r2"), "n3": ("h3", "r1"), "n4": ("h4", "r2")}
    clavis.put_advice(json.dumps(advice_doc({}, topology=racks)))
    job = clavis.submit("-N2")
    assert clavis.placed(job) == "n[1,3]"  # stock: n[1-2], across racks


def test_garbage_advice_never_stops_slurmctld(clavis: MiniCluster) -> None:
    adv = clavis.advice
    garbage: list[bytes] = [
        os.urandom(100_000),
        b"[" * 100_000,
        b'{"schema_version":1,"kind":"clavis.advice","generated":"yesterday",'
        b'"valid_s":180,"nodes":[]}',
        json.dumps({**advice_doc({"n1": "devil"}), "valid_s": -1}).encode(),
        json.dumps({**advice_doc({"n1": "devil"}), "extra": 1}).encode(),
        b'{"nodes":[{"node":"n1","host":"h1","rack":"r1","contention":"ok",'
        b'"node_class":"devil"}],"generated":"2026-01-01T00:00:00Z","valid_s":1e999}',
        b"\x00" * 1000,
        b" " * (5 << 20),  # beyond the default 4 MiB limit
    ]
    for data in garbage:
        clavis.put_advice(data)
        job = clavis.submit("-N1", "--clavis-class=devil")
        assert clavis.placed(job, timeout=10) == "n1", data[:60]
        clavis.cancel_all()
        assert clavis.ctld_alive()
    # a FIFO (open must not block) and a directory in its place
    mark = len(clavis.log())
    adv.unlink()
    os.mkfifo(adv)
    clavis.await_advice(mark)
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job, timeout=10) == "n1"
    clavis.cancel_all()
    mark = len(clavis.log())
    adv.unlink()
    adv.mkdir()
    clavis.await_advice(mark)
    job = clavis.submit("-N1", "--clavis-class=devil")
    assert clavis.placed(job, timeout=10) == "n1"
    assert clavis.ctld_alive()
    clavis.run(["scontrol", "ping"])


def test_one_log_line_per_reason(clavis: MiniCluster) -> None:
    clavis.put_advice("not json")
    for _ in range(3):
        clavis.placed(clavis.submit("-N1", "--clavis-class=devil"))
        clavis.cancel_all()
    time.sleep(0.5)
    lines = [ln for ln in clavis.log().splitlines() if "select/clavis: advice" in ln]
    assert sum("invalid literal" in ln for ln in lines) == 1, lines


def test_bad_class_refused_by_srun_and_salloc(clavis: MiniCluster) -> None:
    """The option is registered for every submitter (spank_option_register), not only
    sbatch; a good value goes through srun as well."""
    for argv in (["srun", "--clavis-class=Devil", "true"], ["salloc", "--clavis-class=", "true"]):
        cp = clavis.run(argv, check=False)
        assert cp.returncode != 0, argv
        assert "must be auto, devil or turtle" in cp.stderr, cp.stderr
    assert clavis.run(["squeue", "-h"]).stdout.strip() == ""
    cp = clavis.run(["srun", "--clavis-class=turtle", "hostname"])
    assert cp.stdout.strip()
