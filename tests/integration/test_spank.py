"""spank_clavis.so on the testbed: real sbatch/srun jobs on the LXC nodes, the plugin in
plugstack.conf, and the monitor's real registration server (clavis_monitor.registry,
which validates every line against the v2 contract) on a socket the nodes can reach.

One witness per hook: the batch step and an srun step are registered (post_fork) with
the right job, step and node, and deregistered (exit); a bad --clavis-class is refused
by sbatch (the option callback); with the socket absent or mute the job runs normally,
starts within the plugin's budget, and the node's log has one line about it.
A running job's step pids, sent from inside the node container's pid namespace, are
the monitor's own pids of those tasks and stay registered across rescans.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_plugin.registry import RecordingRegistry

from clavis_contracts.registration import DeregisterStep, RegisterStep
from clavis_monitor import containers as cg
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.pidns import parse_nspid
from clavis_monitor.registry import RegistrationServer

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]

PLUGIN_DIR = tb.REPO / "slurm-plugin"
PLUGSTACK = tb.RUN_DIR / "etc" / "plugstack.conf"  # beside slurm.conf: Slurm's default
BATCH_STEP = 4294967291
BUDGET_MS = 200
CGROUP = Path("/sys/fs/cgroup")


@pytest.fixture(scope="module")
def plugin(testbed: dict[str, Any]) -> Iterator[Path]:
    """The freshly built .so in the shared directory (same path on every node); the
    plugstack.conf written by each test is removed at the end (stock Slurm again)."""
    subprocess.run(["make", "-C", str(PLUGIN_DIR)], check=True, timeout=300, capture_output=True)
    work = Path(testbed["shared_dir"]) / "clavis-spank"
    work.mkdir(exist_ok=True)
    so = work / "spank_clavis.so"
    shutil.copy2(PLUGIN_DIR / "build" / "spank_clavis.so", so)
    try:
        yield so
    finally:
        PLUGSTACK.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def use_plugstack(so: Path, sock: Path) -> None:
    PLUGSTACK.write_text(f"optional {so} socket={sock} timeout_ms={BUDGET_MS}\n")


def sbatch(work: Path, node: str, body: str, *opts: str) -> tuple[int, str]:
    """Submit, wait for the end (sbatch --wait); the job id and its output."""
    script = work / f"job-{node}-{time.monotonic_ns()}.sh"
    script.write_text("#!/bin/bash\n" + body)
    out = script.with_suffix(".out")
    tb.nodes_usable([node])
    jid = tb.slurm(
        ["sbatch", "--parsable", "--wait", "-w", node, "-D", str(work), "-o", str(out),
         "-t", "2", *opts, str(script)],
        timeout=120,
    )  # fmt: skip
    return int(jid.strip().split(";")[0]), out.read_text()


def job_state(job_id: int) -> str:
    out = tb.slurm(["scontrol", "show", "job", "-o", str(job_id)])
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return f"{fields['JobState']} {fields['ExitCode']}"


def node_log(node: str) -> str:
    return (tb.RUN_DIR / "containers" / node / "var" / "log" / "slurmd.log").read_text(
        errors="replace"
    )


def clavis_lines(node: str, job_id: int) -> list[str]:
    return [
        ln
        for ln in node_log(node).splitlines()
        if "spank: clavis:" in ln and f"JobId={job_id} " in ln
    ]


def wait_for(pred: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


def test_steps_are_registered_and_deregistered(plugin: Path) -> None:
    work = plugin.parent
    sock = work / "monitor.sock"
    reg = RecordingRegistry()
    server = RegistrationServer(sock, reg, timeout_s=2.0).start()
    try:
        use_plugstack(plugin, sock)
        node = "r1h2c1"
        job_id, out = sbatch(
            work, node, "srun -n1 sleep 0.5\necho step-done\n", "--clavis-class=devil"
        )
        assert "step-done" in out
        assert job_state(job_id) == "COMPLETED 0:0"
        # the batch step's deregister comes as its slurmstepd ends, just after the job
        assert wait_for(lambda: sum(isinstance(r, DeregisterStep) for r in reg.requests) >= 2)
    finally:
        server.close()
    assert reg.refused == 0, reg.requests
    regs = {r.step_id: r for r in reg.requests if isinstance(r, RegisterStep)}
    deregs = {r.step_id: r for r in reg.requests if isinstance(r, DeregisterStep)}
    assert set(regs) == {BATCH_STEP, 0}, reg.requests
    assert set(deregs) == {BATCH_STEP, 0}, reg.requests
    for r in [*regs.values(), *deregs.values()]:
        assert (r.node, r.job_id) == (node, job_id)
    for r in regs.values():
        assert r.class_hint == "devil"
        assert r.uid == 0  # the tests submit as root
        assert len(r.pids) == 1 and r.pids[0] > 1
        # proctrack/linuxproc on the testbed: no job cgroups to name
        assert r.cgroups == []
    assert regs[0].app == "sleep"
    assert regs[BATCH_STEP].app is not None
    # the application key: uid and job name (the script's file name, as sbatch names it),
    # the same for both steps, not the batch step's command "slurm_script"
    script_name = regs[BATCH_STEP].job_name
    assert script_name is not None and script_name.startswith(f"job-{node}-"), regs
    assert {r.application() for r in regs.values()} == {f"0:{script_name}"}
    assert reg.steps() == []  # every step the monitor learned of was taken back
    # a registered step is logged at debug level only: nothing at info for this job
    assert clavis_lines(node, job_id) == []


def test_class_defaults_to_auto(plugin: Path) -> None:
    work = plugin.parent
    sock = work / "monitor.sock"
    reg = RecordingRegistry()
    server = RegistrationServer(sock, reg, timeout_s=2.0).start()
    try:
        use_plugstack(plugin, sock)
        job_id, _ = sbatch(work, "r2h1c2", "true\n")
    finally:
        server.close()
    regs = [r for r in reg.requests if isinstance(r, RegisterStep)]
    assert [(r.node, r.job_id, r.class_hint) for r in regs] == [("r2h1c2", job_id, "auto")]


def test_bad_class_is_refused_by_sbatch(plugin: Path) -> None:
    use_plugstack(plugin, plugin.parent / "monitor.sock")
    name = f"clavis-bad-{os.getpid()}"
    cp = subprocess.run(
        [str(tb.CLI), "exec", "--", "sbatch", "-J", name, "--clavis-class=angel", "--wrap", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cp.returncode != 0
    assert "invalid --clavis-class='angel': must be auto, devil or turtle" in cp.stderr
    assert name not in tb.slurm(["squeue", "-h", "-o", "%j"])
    # and in the script: #SBATCH lines go through the same option callback
    script = plugin.parent / "bad-class.sh"
    script.write_text("#!/bin/bash\n#SBATCH --clavis-class=DEVIL\ntrue\n")
    cp = subprocess.run(
        [str(tb.CLI), "exec", "--", "sbatch", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cp.returncode != 0
    assert "invalid --clavis-class='DEVIL'" in cp.stderr


def test_job_runs_when_the_socket_is_absent(plugin: Path) -> None:
    work = plugin.parent
    sock = work / "absent.sock"
    sock.unlink(missing_ok=True)
    use_plugstack(plugin, sock)
    node = "r1h1c2"
    t0 = time.monotonic()
    job_id, out = sbatch(work, node, "echo ran\n", "--clavis-class=turtle")
    assert time.monotonic() - t0 < 20
    assert out == "ran\n"
    assert job_state(job_id) == "COMPLETED 0:0"
    lines = clavis_lines(node, job_id)
    assert len(lines) == 1, lines  # one line, and no deregister attempt after it
    assert "register not sent to" in lines[0] and "No such file or directory" in lines[0]


def test_job_starts_within_the_budget_when_the_monitor_never_answers(plugin: Path) -> None:
    work = plugin.parent
    sock = work / "mute.sock"
    sock.unlink(missing_ok=True)
    accepted: list[float] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(sock))
        srv.listen(16)
        srv.settimeout(0.2)
        stop = threading.Event()
        held: list[socket.socket] = []

        def accept() -> None:  # takes connections, reads nothing, never answers
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                accepted.append(time.time())
                held.append(conn)

        t = threading.Thread(target=accept)
        t.start()
        try:
            use_plugstack(plugin, sock)
            node = "r2h2c2"
            job_id, out = sbatch(work, node, "date +%s.%N\n")
        finally:
            stop.set()
            t.join(5)
            for c in held:
                c.close()
    assert job_state(job_id) == "COMPLETED 0:0"
    assert len(accepted) == 1  # one attempt for the step, none at exit
    started = float(out.strip())
    # the task was held for the plugin's budget at most (plus the task's own start)
    assert 0 < started - accepted[0] < BUDGET_MS / 1000 + 0.8, (started, accepted)
    lines = clavis_lines(node, job_id)
    assert len(lines) == 1 and "(timeout, budget 200 ms)" in lines[0], lines


def _sleeps(secs: str) -> list[int]:
    """Pids of `sleep SECS` (srun runs it by its full path)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] in ([b"sleep", secs.encode()], [b"/usr/bin/sleep", secs.encode()]):
                found.append(int(d.name))
    return found


def _nspid(pid: int) -> tuple[int, ...]:
    return parse_nspid(Path(f"/proc/{pid}/status").read_text())


def test_step_pids_from_a_node_container_are_the_monitors(
    plugin: Path, testbed: dict[str, Any], tmp_path: Path
) -> None:
    work = plugin.parent
    sock = work / "monitor.sock"
    node = "r1h1c1"
    cfg = parse({
        "host": "r1h1",
        "containers": {"lxc_paths": [testbed["lxcpath"]], "include": [node], "rescan_s": 0.5},
        "perf": {"enabled": False},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
    })  # fmt: skip
    agent = Agent(cfg, None)
    server = RegistrationServer(sock, agent.registry, timeout_s=2.0).start()
    secs = f"{4700 + os.getpid() % 100}.25"  # unlike the other tests' sleeps
    name = f"clavis-ns-{os.getpid()}"
    job_id = 0
    try:
        use_plugstack(plugin, sock)
        out = tb.slurm(["sbatch", "--parsable", "-w", node, "-D", str(work), "-o", "/dev/null",
                        "-J", name, "-t", "2", "--clavis-class=devil",
                        "--wrap", f"srun -n1 sleep {secs}"])  # fmt: skip
        job_id = int(out.strip().split(";")[0])
        registered = wait_for(lambda: len(agent.registry.steps()) == 2, timeout=30)
        assert registered, (
            [(s.step_id, s.pids) for s in agent.registry.steps()],
            clavis_lines(node, job_id),
            tb.slurm(["squeue", "-s"]),
        )
        assert wait_for(lambda: _sleeps(secs), timeout=10), [
            Path(f"/proc/{p}/cmdline").read_bytes() for s in agent.registry.steps() for p in s.pids
        ]
        (task,) = _sleeps(secs)
        assert len(_nspid(task)) == 2  # the node container has its own pid namespace
        steps = {s.step_id: s for s in agent.registry.steps()}
        assert set(steps) == {BATCH_STEP, 0}
        assert steps[0].pids == {task}  # the monitor's pid, not the container's
        (script,) = steps[BATCH_STEP].pids
        argv = Path(f"/proc/{script}/cmdline").read_bytes().split(b"\0")
        assert any(a.endswith(b"/slurm_script") for a in argv), argv
        agent.sample_cpu()  # discovery
        for s in steps.values():
            for pid in s.pids:
                assert cg.pid_container(pid, agent.containers, CGROUP) == node
        # rescans (every 0.5 s) prune steps whose pids are gone: these stay, for 12 s
        t_end = time.monotonic() + 12
        while time.monotonic() < t_end:
            agent.sample_cpu()
            time.sleep(0.25)
        assert {s.step_id for s in agent.registry.steps()} == {BATCH_STEP, 0}
        (sample,) = [c for c in agent.build_report().containers if c.name == node]
        assert (sample.job, sample.app, sample.class_hint) == (str(job_id), f"0:{name}", "devil")
    finally:
        if job_id:
            tb.slurm(["scancel", str(job_id)])
        try:
            # the steps' deregisters arrive as their slurmstepds end
            assert wait_for(lambda: agent.registry.steps() == [], timeout=30)
        finally:
            server.close()
            PLUGSTACK.unlink(missing_ok=True)
