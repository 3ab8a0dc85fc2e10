"""A private Slurm 22.05 cluster for the select plugin's tests: one slurmctld and a few
slurmd (`slurmd -N`) on 127.0.0.1 with a port each (TESTBED-NOTES, layout ii), auth/none,
in a directory of its own. It is not the testbed (no containers, no flock): it starts in
a few seconds, and each test gets a fresh one with the SelectType it asks for."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "slurm-plugin" / "build"
DEBIAN_PLUGINS = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
IDLE_DEADLINE_S = 30.0
# the plugin looks at the advice every 0.2 s and parses 4 MiB in about 0.1 s: 10 s is
# slack for a loaded machine
ADVICE_DEADLINE_S = 10.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class MiniCluster:
    """`root` is the cluster's directory as this process sees it. With `chroot`, the
    daemons and commands run in that root (the Debian 13 root with Slurm 24.11), `root`
    must lie inside it, and `build` is the plugins' directory as seen from inside."""

    def __init__(
        self,
        root: Path,
        select: str,
        nodes: int = 4,
        chroot: Path | None = None,
        build: Path = BUILD,
    ) -> None:
        self.root, self.select, self.names = root, select, [f"n{i}" for i in range(1, nodes + 1)]
        self.chroot, self.build = chroot, build
        self.conf = root / "slurm.conf"
        self.advice = root / "advice.json"
        self.procs: list[subprocess.Popen[bytes]] = []

    def inside(self, path: Path) -> Path:
        """A path of ours as the daemons see it."""
        if self.chroot is None:
            return path
        return Path("/") / path.relative_to(self.chroot)

    def cmd(self, argv: list[str]) -> list[str]:
        return argv if self.chroot is None else ["chroot", str(self.chroot), *argv]

    def write_conf(self, advice_max_bytes: int | None = None) -> None:
        for d in ("state", "log", "spool"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        r = self.inside(self.root)
        lines = [
            "ClusterName=clavistest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/none",
            "CredType=cred/none",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"PluginDir={DEBIAN_PLUGINS}:{self.build}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            f"SelectType={self.select}",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SlurmctldDebug=verbose",
            "DebugFlags=SelectType",
        ]
        for n in self.names:
            lines.append(
                f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={_free_port()} CPUs=1"
            )
        lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        conf = [f"AdvicePath={self.inside(self.advice)}"]
        if advice_max_bytes is not None:
            conf.append(f"AdviceMaxBytes={advice_max_bytes}")
        (self.root / "select_clavis.conf").write_text("\n".join(conf) + "\n")
        # the SPANK plugin carries --clavis-class to slurmctld; no monitor here
        self.use_monitor(self.root / "no-monitor.sock")

    def use_monitor(self, sock: Path) -> None:
        """plugstack.conf with spank_clavis.so talking to `sock` (a path of ours)."""
        (self.root / "plugstack.conf").write_text(
            f"optional {self.build / 'spank_clavis.so'} socket={self.inside(sock)}\n"
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.inside(self.conf))}

    def start(self, advice_max_bytes: int | None = None) -> None:
        self.write_conf(advice_max_bytes)
        out = open(self.root / "log" / "daemons.out", "ab")  # noqa: SIM115 - kept for the children
        self.procs.append(
            subprocess.Popen(
                self.cmd(["slurmctld", "-D", "-i", "-f", str(self.inside(self.conf))]),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
            )
        )
        for n in self.names:
            self.procs.append(
                subprocess.Popen(
                    self.cmd(["slurmd", "-D", "-N", n, "-f", str(self.inside(self.conf))]),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env(),
                )
            )
        out.close()
        deadline = time.monotonic() + IDLE_DEADLINE_S
        while time.monotonic() < deadline:
            cp = self.run(["sinfo", "-N", "-h", "-o", "%N %T"], check=False)
            states = dict(ln.split() for ln in cp.stdout.splitlines() if ln.strip())
            if all(states.get(n) == "idle" for n in self.names):
                return
            time.sleep(0.3)
        raise AssertionError(f"mini cluster not idle: {self.log()[-3000:]}")

    def put_advice(self, data: bytes | str) -> None:
        """Replace the advice file as clavisd does (a write, then a rename) and wait
        until the plugin has taken it (await_advice)."""
        mark = len(self.log())
        tmp = self.advice.with_name(self.advice.name + ".tmp")
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        tmp.rename(self.advice)
        self.await_advice(mark)

    def await_advice(self, mark: int, timeout: float = ADVICE_DEADLINE_S) -> None:
        """Wait until select/clavis's watcher thread has handled the advice path as it
        is now (its DebugFlags=SelectType line after log offset `mark` names the file's
        inode, size and mtime, or says it is missing), so that every later job test
        sees what the file gave. The plugin reads the file in that thread, never in a
        job test, so a job submitted right after a write could still see the old."""
        want = taken_line(self.advice, self.inside(self.advice))
        deadline = time.monotonic() + timeout
        while want not in self.log()[mark:]:
            if time.monotonic() > deadline:
                raise AssertionError(f"select/clavis did not take the advice: {want!r} "
                                     f"not in {self.log()[mark:][-2000:]}")  # fmt: skip
            time.sleep(0.05)

    def ctld_alive(self) -> bool:
        return self.procs[0].poll() is None

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        cp = subprocess.run(
            self.cmd(argv),
            capture_output=True,
            text=True,
            timeout=60,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if check:
            assert cp.returncode == 0, f"{argv} -> {cp.returncode}: {cp.stderr}"
        return cp

    def submit(self, *opts: str) -> int:
        """A job that holds its nodes; returns once it runs (or raises)."""
        out = self.run(["sbatch", "--parsable", "-o", "/dev/null", *opts, "--wrap", "sleep 120"])
        return int(out.stdout.strip().split(";")[0])

    def placed(self, job: int, timeout: float = 20.0) -> str:
        """The job's node list once it runs; "PENDING" if it does not start in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run(["squeue", "-h", "-j", str(job), "-o", "%T %N"]).stdout.split()
            if out and out[0] == "RUNNING":
                return out[1]
            time.sleep(0.2)
        return "PENDING"

    def cancel_all(self) -> None:
        self.run(["scancel", "--user=root"], check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.run(["squeue", "-h"], check=False).stdout.strip():
                return
            time.sleep(0.3)

    def log(self) -> str:
        p = self.root / "log" / "slurmctld.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def stop(self) -> None:
        if self.procs and self.ctld_alive():
            self.cancel_all()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()
        for pid in self.job_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def job_processes(self) -> list[int]:
        """Processes of this cluster's jobs still alive (their environment names our
        slurm.conf): a step killed while its slurmd stopped can leave one behind."""
        mark = f"SLURM_CONF={self.inside(self.conf)}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in env:
                found.append(int(proc.name))
        return found


def taken_line(advice: Path, as_logged: Path) -> str:
    """The line select/clavis logs (DebugFlags=SelectType) once its watcher thread has
    handled the advice file `advice` as it is now; `as_logged`: its path as slurmctld
    names it."""
    try:
        st = os.stat(advice)
    except FileNotFoundError:
        return f"select/clavis: file {as_logged} changed: missing"
    s, ns = divmod(st.st_mtime_ns, 1_000_000_000)
    return (f"select/clavis: file {as_logged} changed (inode {st.st_ino}, {st.st_size} "
            f"bytes, mtime {s}.{ns:09d})")  # fmt: skip


def slurm_available() -> bool:
    return bool(shutil.which("slurmctld")) and bool(shutil.which("slurmd")) and os.geteuid() == 0
