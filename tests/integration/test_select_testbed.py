"""select_clavis.so on the testbed: slurmctld runs SelectType=select/clavis (up installs
it when slurm-plugin/build/select_clavis.so exists) over the LXC nodes, and these tests
submit real jobs with sbatch.

Placement without usable advice is compared with stock select/cons_tres by running it:
the same job sequence (1-, 2- and 3-node jobs, devil-hinted ones, and a cancellation that
leaves two holes, so cons_tres's best fit and not simply "the first free nodes" decides)
runs once on a private cluster with SelectType=select/cons_tres (minicluster.py from
tests/slurm_plugin: the same Slurm, as many nodes in the same order with the same CPUs,
the same partition and select parameters; not a testbed, it starts in seconds on
127.0.0.1), and the node indices it gets are the expected ones on the testbed, with no
advice file and with a corrupt one. The testbed cannot switch its own slurmctld to
cons_tres for a reference run without restarting it and every slurmd.

With advice (written as clavisd writes it: the contract's AdviceFile through
clavis.service.advice.publish, an atomic rename) that marks the host of cons_tres's
choice as running a devil, a devil-hinted job goes to another host and the same job
unhinted or `--clavis-class=auto` stays where cons_tres puts it. Random bytes and a
64 MiB file in place of the advice leave slurmctld running and jobs starting, placed as
cons_tres places them.
"""

from __future__ import annotations

import grp
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from slurm_plugin.minicluster import BUILD, MiniCluster, slurm_available, taken_line

from clavis.service.advice import publish
from clavis_contracts import AdviceFile, AdviceNode

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

Slurm = Callable[[list[str]], str]  # a Slurm command on one cluster -> its stdout
JOB_NAME = "clavis-select-test"
PLUGSTACK = tb.RUN_DIR / "etc" / "plugstack.conf"  # beside slurm.conf
CTLD_LOG = tb.RUN_DIR / "log" / "slurmctld.log"
HUGE = 64 << 20

# ("submit", sbatch options) or ("cancel", index of an earlier submission); each job
# holds its nodes until cancelled. 8 one-CPU nodes: 1 + 2 + 1 + 3 leaves one free node,
# the cancellation frees two more elsewhere, then a 1-node and a 2-node job choose.
SEQUENCE: list[tuple[str, Any]] = [
    ("submit", ("-N1",)),
    ("submit", ("-N2",)),
    ("submit", ("-N1", "--clavis-class=devil")),
    ("submit", ("-N3",)),
    ("cancel", 1),
    ("submit", ("-N1", "--clavis-class=devil")),
    ("submit", ("-N2",)),
]


@dataclass
class SelectBed:
    nodes: list[str]  # Slurm's node order (slurm.conf)
    racks: dict[str, str]  # host -> rack
    advice: Path
    work: Path
    ctld_pid: int


def conf_nodes(conf: Path) -> list[str]:
    return re.findall(r"^NodeName=(\S+)", conf.read_text(), flags=re.MULTILINE)


def expand(slurm: Slurm, nodelist: str) -> list[str]:
    return slurm(["scontrol", "show", "hostnames", nodelist]).split()


def submit(slurm: Slurm, work: Path, *opts: str) -> int:
    out = slurm(
        ["sbatch", "--parsable", "-J", JOB_NAME, "-D", str(work), "-o", "/dev/null",
         "-t", "10", *opts, "--wrap", "sleep 600"]
    )  # fmt: skip
    return int(out.strip().split(";")[0])


def running_on(slurm: Slurm, job: int, timeout: float = 30.0) -> list[str]:
    """The job's nodes once it runs (it must start within `timeout`)."""
    deadline = time.monotonic() + timeout
    state: list[str] = []
    while time.monotonic() < deadline:
        state = slurm(["squeue", "-h", "-j", str(job), "-o", "%T %N"]).split()
        if state and state[0] == "RUNNING":
            return expand(slurm, state[1])
        time.sleep(0.2)
    raise AssertionError(f"job {job} did not start within {timeout:.0f}s: {state}")


def wait_quiet(slurm: Slurm, nodes: list[str], timeout: float = 60.0) -> None:
    """No job in the queue and every node idle (cancelled jobs fully gone)."""
    deadline = time.monotonic() + timeout
    queue, states = "", {}
    while time.monotonic() < deadline:
        queue = slurm(["squeue", "-h", "-o", "%i %T %N"]).strip()
        out = slurm(["sinfo", "-N", "-h", "-o", "%N %T"])
        states = dict(ln.split() for ln in out.splitlines() if ln.strip())
        if not queue and all(states.get(n) == "idle" for n in nodes):
            return
        time.sleep(0.3)
    raise AssertionError(f"cluster not quiet after {timeout:.0f}s: queue {queue!r}, {states}")


def cancel(slurm: Slurm, nodes: list[str], job: int, timeout: float = 60.0) -> None:
    """Cancel one job; return once it left the queue and its `nodes` are idle again."""
    slurm(["scancel", str(job)])
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        queued = str(job) in slurm(["squeue", "-h", "-o", "%i"]).split()
        out = slurm(["sinfo", "-N", "-h", "-n", ",".join(nodes), "-o", "%N %T"])
        if not queued and all(ln.split()[1] == "idle" for ln in out.splitlines() if ln.strip()):
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job} or its nodes not done {timeout:.0f}s after scancel: {out}")


def run_sequence(slurm: Slurm, nodes: list[str], work: Path) -> list[list[int]]:
    """Submit SEQUENCE on a quiet cluster; each submission's node indices (Slurm's node
    order), then everything cancelled and the cluster quiet again."""
    wait_quiet(slurm, nodes)
    jobs: list[int] = []
    placed: list[list[int]] = []
    try:
        for what, arg in SEQUENCE:
            if what == "cancel":
                held = [nodes[i] for i in placed[arg]]
                cancel(slurm, held, jobs[arg])
                continue
            job = submit(slurm, work, *arg)
            jobs.append(job)
            placed.append([nodes.index(n) for n in running_on(slurm, job)])
    except BaseException:
        if jobs:
            slurm(["scancel", *map(str, jobs)])
        raise
    slurm(["scancel", *map(str, jobs)])
    wait_quiet(slurm, nodes)
    return placed


@pytest.fixture(scope="module")
def clavis_tb(testbed: dict[str, Any]) -> Iterator[SelectBed]:
    """The testbed running select/clavis, with spank_clavis.so in plugstack.conf (it
    carries --clavis-class to slurmctld; no monitor listens, which only costs one line
    in slurmd's log per step). Afterwards: our jobs cancelled, plugstack.conf and the
    advice file removed."""
    select = testbed["select"]
    if select["type"] != "select/clavis":
        pytest.skip(
            f"the testbed runs {select['type']}: slurm-plugin/build/select_clavis.so was "
            "not built before up (make slurm-plugin)"
        )
    assert (BUILD / "spank_clavis.so").is_file(), "make slurm-plugin builds both plugins"
    work = Path(testbed["shared_dir"]) / "clavis-select"
    work.mkdir(exist_ok=True)
    spank = work / "spank_clavis.so"
    shutil.copy2(BUILD / "spank_clavis.so", spank)
    PLUGSTACK.write_text(f"optional {spank} socket={work / 'no-monitor.sock'}\n")
    advice = Path(select["advice_file"])
    (ctld,) = [p["pid"] for p in tb.status()["processes"] if p["what"] == "slurmctld"]
    hosts = testbed["hosts"]
    try:
        yield SelectBed(
            nodes=conf_nodes(Path(testbed["slurm_conf"])),
            racks={h["name"]: f"r{h['rack']}" for h in hosts},
            advice=advice,
            work=work,
            ctld_pid=ctld,
        )
    finally:
        tb.run([str(tb.CLI), "exec", "--", "scancel", "-n", JOB_NAME])
        PLUGSTACK.unlink(missing_ok=True)
        advice.unlink(missing_ok=True)
        for tmp in advice.parent.glob(f".{advice.name}.*"):
            tmp.unlink()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def stock(clavis_tb: SelectBed, tmp_path_factory: pytest.TempPathFactory) -> list[list[int]]:
    """SEQUENCE's node indices under stock select/cons_tres, on a private cluster of as
    many one-CPU nodes (see the module's docstring)."""
    if not slurm_available():
        pytest.skip("needs slurmctld and slurmd")
    topo = tb.status()["topology"]
    if topo["cpus_per_container"] != 1:
        pytest.skip("the reference cluster has one CPU per node")
    root = tmp_path_factory.mktemp("stock")
    c = MiniCluster(root, "select/cons_tres", nodes=len(clavis_tb.nodes))
    try:
        c.start()
        want = run_sequence(lambda argv: c.run(argv).stdout, c.names, root)
    finally:
        c.stop()
    return want


def publish_for_slurmctld(path: Path, advice: AdviceFile) -> None:
    """Publish as a clavisd for the testbed is configured to: slurmctld runs as
    SlurmUser `slurm` and reads the advice through its group (advice.mode 0640,
    advice.group slurm); clavisd's default 0600 would be unreadable to it."""
    publish(path, advice, mode=0o640, gid=grp.getgrnam("slurm").gr_gid)


def bed_slurm(argv: list[str]) -> str:
    return tb.slurm(argv)


def advice_file(t: SelectBed, devil_node: str) -> AdviceFile:
    """clavisd's advice: `devil_node` runs a devil, so its host is "ok" (devils within
    tolerance) and every other host "devil-free"."""
    devil_host = tb.host_of(devil_node)
    return AdviceFile(
        generated=datetime.now(UTC),
        valid_s=180.0,
        nodes=[
            AdviceNode(
                node=n,
                host=tb.host_of(n),
                rack=t.racks[tb.host_of(n)],
                contention="ok" if tb.host_of(n) == devil_host else "devil-free",
                node_class="devil" if n == devil_node else "turtle",
            )
            for n in t.nodes
        ],
    )


def write_atomic(path: Path, chunks: list[bytes]) -> None:
    tmp = path.with_name(f".{path.name}.test")
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


def await_taken(t: SelectBed, offset: int, timeout: float = 10.0) -> None:
    """Wait until select/clavis has taken the advice file as it is now: its watcher
    thread reads the file (never a job test), then logs the file's identity (the
    testbed runs DebugFlags=SelectType)."""
    want = taken_line(t.advice, t.advice)
    deadline = time.monotonic() + timeout
    while want not in log_from(offset):
        assert time.monotonic() < deadline, (want, log_from(offset)[-2000:])
        time.sleep(0.05)


def log_from(offset: int) -> str:
    with open(CTLD_LOG, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def ctld_alive(t: SelectBed) -> bool:
    """The slurmctld `up` started is still running (same pid, still slurmctld)."""
    if tb.live_pids([t.ctld_pid]) != [t.ctld_pid]:
        return False
    return Path(f"/proc/{t.ctld_pid}/comm").read_text().strip() == "slurmctld"


def test_slurmctld_runs_select_clavis(clavis_tb: SelectBed, testbed: dict[str, Any]) -> None:
    out = tb.slurm(["scontrol", "show", "config"])
    assert re.search(r"^SelectType\s+= select/clavis$", out, flags=re.MULTILINE), out
    assert "select: select/clavis " in testbed["up_stdout"].splitlines()[0]
    conf = (tb.RUN_DIR / "etc" / "select_clavis.conf").read_text()
    assert f"AdvicePath={clavis_tb.advice}\n" in conf
    # slurmctld loaded it with that configuration (logged at init)
    log = CTLD_LOG.read_text(errors="replace")
    assert f"select/clavis loaded (advice {clavis_tb.advice}, at most 4194304 bytes)" in log
    # the nodes load the same .so from the same path (their slurmd decodes job records)
    so = tb.RUN_DIR / "etc" / "plugins" / "select_clavis.so"
    assert so.read_bytes() == (BUILD / "select_clavis.so").read_bytes()
    inside = tb.lxc_attach(clavis_tb.nodes[-1], f"sha256sum {so}").split()[0]
    assert inside == hashlib.sha256(so.read_bytes()).hexdigest()
    assert re.search(rf"^PluginDir\s+= \S+:{so.parent}$", out, flags=re.MULTILINE), out


@pytest.mark.parametrize("advice", ["missing", "corrupt"])
def test_without_usable_advice_placement_equals_cons_tres(
    clavis_tb: SelectBed, stock: list[list[int]], advice: str
) -> None:
    t = clavis_tb
    offset = CTLD_LOG.stat().st_size
    if advice == "missing" and t.advice.exists():
        t.advice.unlink()
        await_taken(t, offset)
    elif advice == "corrupt":
        # half of a real advice file that would steer the first devil-hinted job
        whole = advice_file(t, t.nodes[stock[2][0]]).model_dump_json().encode()
        write_atomic(t.advice, [whole[: len(whole) // 2]])
        await_taken(t, offset)
    got = run_sequence(bed_slurm, t.nodes, t.work)
    assert got == stock, {"testbed": got, "cons_tres": stock}
    assert ctld_alive(t)
    reason = "missing" if advice == "missing" else ""
    lines = [ln for ln in log_from(offset).splitlines() if "placing as cons_tres" in ln]
    if advice == "corrupt" or lines:  # "missing" may have been logged before this test
        assert any(f"select/clavis: advice {t.advice} {reason}" in ln for ln in lines), lines


def test_devil_hinted_job_avoids_the_host_running_a_devil(
    clavis_tb: SelectBed, stock: list[list[int]]
) -> None:
    t = clavis_tb
    # where cons_tres puts a 1-node job on the idle cluster; its host runs a devil now
    target = t.nodes[stock[0][0]]
    offset = CTLD_LOG.stat().st_size
    publish_for_slurmctld(t.advice, advice_file(t, target))
    await_taken(t, offset)
    wait_quiet(bed_slurm, t.nodes)
    job = submit(bed_slurm, t.work, "-N1", "--clavis-class=devil")
    (node,) = running_on(bed_slurm, job)
    assert tb.host_of(node) != tb.host_of(target), (node, target)
    cancel(bed_slurm, [node], job)
    for opts in ((), ("--clavis-class=auto",)):
        job = submit(bed_slurm, t.work, "-N1", *opts)
        assert running_on(bed_slurm, job) == [target], opts
        cancel(bed_slurm, [target], job)
    log = log_from(offset)
    assert f"select/clavis: advice {t.advice}: {len(t.nodes)} nodes" in log
    assert "placed on advised nodes" in log


@pytest.mark.parametrize("kind", ["garbage", "huge"])
def test_garbage_or_huge_advice_keeps_slurmctld_running(
    clavis_tb: SelectBed, stock: list[list[int]], kind: str
) -> None:
    t = clavis_tb
    target = t.nodes[stock[0][0]]
    # valid advice first, so the test sees it dropped, not merely never read
    offset = CTLD_LOG.stat().st_size
    publish_for_slurmctld(t.advice, advice_file(t, target))
    await_taken(t, offset)
    wait_quiet(bed_slurm, t.nodes)
    job = submit(bed_slurm, t.work, "-N1", "--clavis-class=devil")
    (node,) = running_on(bed_slurm, job)
    assert tb.host_of(node) != tb.host_of(target)
    cancel(bed_slurm, [node], job)
    offset = CTLD_LOG.stat().st_size
    if kind == "garbage":
        write_atomic(t.advice, [os.urandom(1 << 20)])
    else:
        # the same steering advice padded to 64 MiB: a reader that ignored its size
        # limit would find it valid and move the job
        doc = advice_file(t, target).model_dump_json().encode()
        pad = b" " * (1 << 20)
        write_atomic(t.advice, [doc, *[pad] * (HUGE // len(pad))])
        assert t.advice.stat().st_size > HUGE
    await_taken(t, offset)
    for opts in (("--clavis-class=devil",), ()):
        job = submit(bed_slurm, t.work, "-N1", *opts)
        assert running_on(bed_slurm, job, timeout=20) == [target], opts
        cancel(bed_slurm, [target], job)
        assert ctld_alive(t)
    tb.slurm(["scontrol", "ping"])
    why = "larger than its size limit" if kind == "huge" else ""
    lines = [ln for ln in log_from(offset).splitlines() if "placing as cons_tres" in ln]
    assert any(f"advice {t.advice} {why}" in ln for ln in lines), lines
    t.advice.unlink()
