"""LXC system containers checkpointed and restored with CRIU through ``lxc-checkpoint``.

Known traps (TESTBED-NOTES, "CRIU" and "LXC / LXD"), each handled here:
- lxc-checkpoint has no flag for CRIU options: they go to a CRIU config file named by
  ``CRIU_CONFIG_FILE``, one for dump (``tcp-established``) and one for restore (plus
  ``mntns-compat-mode``, which criu dump refuses).
- A restored container inherits its caller's stdout/stderr: they go to a log file, never
  a pipe, or the caller hangs.
- LXC reaches a running container through an abstract socket, which belongs to a netns:
  the agent runs in the host's netns, and so does every lxc-* command it runs.
- A killed process may stay a zombie for a while: a pid in state Z is not running.
- Processes restored run at once, before anything can be checked: a job whose TCP
  connection came back closed would act on it (end, and its slurmstepd clean the job's
  spool on storage the source shares). So CRIU restores them stopped
  (``leave-stopped``), verify checks their tree and connections, and only then lets them
  run (SIGCONT, except those stopped at the dump).

The container's configuration and root filesystem must exist on the target under the
same lxcpath (shared or provisioned storage); only the CRIU images move.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from clavis_migrator import announce, checks
from clavis_migrator.backend import BackendError, NotVerifiedError, Size
from clavis_migrator.config import LxcConfig

TREE_FILE: Final = "clavis-tree.json"

# Mount a sysfs made in this netns and bind only its network directories over /sys, in a
# private mount namespace: LXC finds the host's bridge under /sys/class/net, and the
# rest of /sys (the cgroup mounts) stays as it is.
_SYSFS_SCRIPT: Final = """set -e
tmp=$(mktemp -d /tmp/clavis-migrator-sysfs.XXXXXX)
mount -t sysfs none "$tmp"
for sub in class/net devices/virtual/net; do mount --bind "$tmp/$sub" "/sys/$sub"; done
umount -l "$tmp"
rmdir "$tmp"
exec "$@"
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# A process that had run this long at the dump must be back after the restore; younger
# ones (a job's `sleep 0.1`) may rightly have ended by the time the tree is looked at. The
# container's init and its direct children (its daemons: slurmd, munged, slurmstepd) must
# be back whatever their age: a container restored a moment ago has only young processes.
LONG_LIVED_S: Final = 5.0
# asks of a restored slurmd's status before the restore counts as failed
SLURMD_TRIES: Final = 3
# CRIU's restore option that leaves the restored tasks stopped (SIGSTOP)
RESTORE_STOPPED: Final = "leave-stopped"


@dataclass(frozen=True)
class Proc:
    age_s: float
    ppid: int  # in the container's pid namespace (0 for its init)
    name: str = ""  # its comm
    host_pid: int = 0  # its pid in this agent's namespace
    state: str = ""  # /proc/PID/stat's (R, S, T, ...)


@dataclass(frozen=True)
class Expected:
    """What a restore must bring back, as the dump saw it (TREE_FILE)."""

    long_lived: list[int]
    stopped: list[int]  # stopped at the dump (a job's ^Z): left stopped after the restore
    tcp: list[checks.Conn]  # lasting ESTABLISHED connections (checks.py)
    slurmd: int | None  # slurmd's pid in the container
    slurm_conf: str  # the config file that slurmd was started with ("": Slurm's default)

    @staticmethod
    def read(path: Path) -> Expected:
        """An older agent's file has no tcp or slurmd: nothing of them is checked."""
        doc = json.loads(path.read_text())
        slurmd = doc.get("slurmd") or {}
        return Expected(
            [int(p) for p in doc["long_lived"]],
            [int(p) for p in doc.get("stopped", [])],
            [(str(a), str(b)) for a, b in doc.get("tcp", [])],
            int(slurmd["pid"]) if "pid" in slurmd else None,
            str(slurmd.get("conf", "")),
        )


def tree(init_pid: int) -> dict[int, Proc]:
    """The container's live processes (zombies excluded), by their pid inside it."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    # host pid -> (ns pid, age, host ppid, comm, state)
    outer: dict[int, tuple[int, float, int, str, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            text = Path(f"/proc/{entry}/stat").read_text()
            comm = text[text.find("(") + 1 : text.rfind(")")]
            stat = text.rsplit(")", 1)[1].split()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if stat[0] in ("Z", "X"):
            continue
        nspid = next(
            (ln.split()[-1] for ln in status.splitlines() if ln.startswith("NSpid:")), entry
        )
        outer[int(entry)] = (
            int(nspid), uptime - int(stat[19]) / ticks, int(stat[1]), comm, stat[0]
        )  # fmt: skip
    return {
        nspid: Proc(age, outer[ppid][0] if ppid in outer else 0, comm, host, state)
        for host, (nspid, age, ppid, comm, state) in outer.items()
    }


def must_come_back(procs: dict[int, Proc]) -> list[int]:
    """The pids a restore must bring back: old processes, init and init's children."""
    return sorted(
        p for p, pr in procs.items() if pr.age_s >= LONG_LIVED_S or p == 1 or pr.ppid == 1
    )


def _slurmd(procs: dict[int, Proc]) -> tuple[int, Proc] | None:
    """The container's slurmd daemon (init's child named slurmd), if it runs one."""
    return next(((p, pr) for p, pr in sorted(procs.items())
                 if pr.name == "slurmd" and pr.ppid == 1), None)  # fmt: skip


def _config_size(path: Path) -> Size:
    """Cores (cpuset members, 1 without a cpuset) and memory limit of an LXC config."""
    cores, memory = 1, 0
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in ("lxc.cgroup.cpuset.cpus", "lxc.cgroup2.cpuset.cpus"):
            cores = 0
            for part in value.split(","):
                lo, _, hi = part.partition("-")
                cores += int(hi) - int(lo) + 1 if hi else 1
        elif key in ("lxc.cgroup.memory.limit_in_bytes", "lxc.cgroup2.memory.max") and (
            value.isdigit()
        ):
            memory = int(value)
    return Size(cores, memory)


def config_cpuset(path: Path) -> str:
    """The cpuset.cpus an LXC config gives its container ("" without one)."""
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("lxc.cgroup.cpuset.cpus", "lxc.cgroup2.cpuset.cpus"):
            return value.strip()
    return ""


class LxcBackend:
    def __init__(self, cfg: LxcConfig, state_dir: Path) -> None:
        self.cfg = cfg
        self.path = Path(cfg.lxcpath)
        self.logs = state_dir / "log"
        self.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dump_conf = state_dir / "criu-dump.conf"
        self.restore_conf = state_dir / "criu-restore.conf"
        self.dump_conf.write_text("".join(f"{o}\n" for o in cfg.dump_options))
        # stopped after the restore until verify has looked (the module's docstring)
        restore = [*cfg.restore_options, *(() if RESTORE_STOPPED in cfg.restore_options
                                           else (RESTORE_STOPPED,))]  # fmt: skip
        self.restore_conf.write_text("".join(f"{o}\n" for o in restore))
        # per container restored here: what must be back (Expected)
        self._expected: dict[str, Expected] = {}

    def _lxc(self, cmd: str, name: str, *args: str) -> list[str]:
        return [cmd, "-n", name, "-P", str(self.path), *args]

    def _env(self, conf: Path) -> dict[str, str]:
        env = dict(os.environ)
        if self.cfg.criu:
            crit = str(Path(self.cfg.criu).parent)
            env["PATH"] = f"{crit}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        env["CRIU_CONFIG_FILE"] = str(conf)
        return env

    def _run(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"{argv[0]}: {exc}") from exc

    def _state(self, name: str) -> str:
        cp = self._run(self._lxc("lxc-info", name, "-s", "-H"))
        return cp.stdout.strip() if cp.returncode == 0 else "ABSENT"

    def _init_pid(self, name: str) -> int | None:
        cp = self._run(self._lxc("lxc-info", name, "-p", "-H"))
        text = cp.stdout.strip()
        return int(text) if cp.returncode == 0 and text.isdigit() else None

    def running(self) -> dict[str, Size]:
        cp = self._run(["lxc-ls", "-P", str(self.path), "--running", "-1"])
        if cp.returncode != 0:
            raise BackendError(f"lxc-ls failed: {cp.stderr.strip()}")
        out = {}
        for name in cp.stdout.split():
            conf = self.path / name / "config"
            if conf.is_file():
                out[name] = _config_size(conf)
        return out

    def known(self, name: str) -> bool:
        return (self.path / name / "config").is_file()

    def _log(self, what: str, name: str) -> Path:
        return self.logs / f"{what}-{name}-{int(time.time())}.log"

    def checkpoint(self, name: str, images: Path) -> None:
        self._dump(name, images, stop=True)

    def precheckpoint(self, name: str, images: Path) -> None:
        # lxc-checkpoint without -s runs criu dump --leave-running (precopy.py says why
        # not criu pre-dump)
        self._dump(name, images, stop=False)

    def _dump(self, name: str, images: Path, stop: bool) -> None:
        pid = self._init_pid(name)
        if pid is None:
            raise BackendError(f"{name} does not run here")
        tcp: list[checks.Conn] = []
        if stop and self.cfg.tcp_check:
            # two reads apart: the connections that last (checks.py)
            first = checks.established(checks.sockets(pid))
            time.sleep(checks.LASTING_S)
            tcp = sorted(first & checks.established(checks.sockets(pid)))
        before = tree(pid)
        long_lived = must_come_back(before)
        stopped = sorted(p for p, pr in before.items() if pr.state in ("T", "t"))
        doc: dict[str, object] = {
            "processes": len(before), "long_lived": long_lived, "stopped": stopped, "tcp": tcp,
        }  # fmt: skip
        slurmd = _slurmd(before)
        if slurmd is not None:
            ns_pid, proc = slurmd
            try:
                cmdline = Path(f"/proc/{proc.host_pid}/cmdline").read_bytes()
            except OSError:
                cmdline = b""
            doc["slurmd"] = {"pid": ns_pid, "conf": checks.slurm_conf_of(cmdline)}
        (images / TREE_FILE).write_text(json.dumps(doc))
        log = self._log("dump" if stop else "predump", name)
        flags = ["-s"] if stop else []
        with open(log, "wb") as out:
            try:
                cp = subprocess.run(
                    self._lxc("lxc-checkpoint", name, *flags, "-v", "-D", str(images)),
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    env=self._env(self.dump_conf), timeout=self.cfg.timeout_s, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BackendError(f"lxc-checkpoint {name}: {exc}; see {log}") from exc
        if cp.returncode != 0:
            what = "-s " if stop else "(leave running) "
            raise BackendError(f"lxc-checkpoint {what}{name} exited {cp.returncode}; see {log}")

    def restore(self, name: str, images: Path) -> None:
        if not (images / "inventory.img").is_file():
            raise BackendError(f"no CRIU images of {name} in {images}")
        argv = self._lxc("lxc-checkpoint", name, "-r", "-v", "-D", str(images))
        if self.cfg.netns_sysfs:
            argv = ["unshare", "--mount", "--", "sh", "-c", _SYSFS_SCRIPT, "sh", *argv]
        log = self._log("restore", name)
        # the restored container keeps these open: a file, never a pipe
        with open(log, "wb") as out:
            try:
                cp = subprocess.run(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    env=self._env(self.restore_conf), timeout=self.cfg.timeout_s, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BackendError(f"lxc-checkpoint -r {name}: {exc}; see {log}") from exc
        if cp.returncode != 0:
            raise BackendError(f"lxc-checkpoint -r {name} exited {cp.returncode}; see {log}")
        # A restore through lxc-checkpoint brings the memory limit back but leaves
        # cpuset.cpus at the parent's (every CPU): give the container its cpuset again.
        cpus = config_cpuset(self.path / name / "config")
        if cpus:
            got = self._run(self._lxc("lxc-cgroup", name, "cpuset.cpus", cpus))
            if got.returncode != 0:
                raise BackendError(
                    f"lxc-cgroup {name} cpuset.cpus {cpus}: {got.stderr.strip()[-300:]}"
                )
        try:
            self._expected[name] = Expected.read(images / TREE_FILE)
        except (OSError, ValueError, KeyError, TypeError):
            self._expected.pop(name, None)

    def verify(self, name: str) -> str:
        state = self._state(name)
        pid = self._init_pid(name)
        if state != "RUNNING" or pid is None:
            raise BackendError(f"{name} is {state} after the restore")
        # the sockets first: the closer to the restore, the fewer a job closed since
        table = checks.sockets(pid)
        now = tree(pid)
        expected = self._expected.get(name, Expected([], [], [], None, ""))
        want = expected.long_lived
        missing = sorted(set(want) - set(now))
        if not now or missing:
            raise BackendError(
                f"{name}: after the restore {len(now)} processes, missing pids {missing} "
                "that ran before the dump"
            )
        said = ""
        if self.cfg.tcp_check and expected.tcp:
            lost = checks.not_back(expected.tcp, table)
            if lost:
                raise NotVerifiedError(
                    f"{name}: TCP connections not established after the restore: "
                    + ", ".join(lost[:5])
                    + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
                )
            said += f", {len(expected.tcp)} TCP connections established again"
            closed = checks.closing(expected.tcp, table)
            if closed:
                said += f" ({closed} closed since by their ends)"
        self._resume(now, expected.stopped)
        if self.cfg.slurmd_check and expected.slurmd is not None:
            said += f", {self._slurmd_answers(name, expected)}"
        if self.cfg.verify_command:
            cp = self._run(
                [*self._lxc("lxc-attach", name), "--", *self.cfg.verify_command],
                timeout=self.cfg.timeout_s,
            )
            if cp.returncode != 0:
                raise BackendError(
                    f"{name}: {' '.join(self.cfg.verify_command)} exited {cp.returncode}: "
                    f"{(cp.stderr or cp.stdout).strip()[:300]}"
                )
            said = ", check passed"
        if self.cfg.announce:
            said += f", announced {announce.from_netns(pid)}"
        return f"RUNNING, {len(now)} processes, all {len(want)} lasting ones back{said}"

    def _resume(self, procs: dict[int, Proc], keep: list[int]) -> None:
        """SIGCONT to every process of the container but those stopped at the dump."""
        for ns_pid, pr in procs.items():
            if ns_pid in keep or not pr.host_pid:
                continue
            try:
                os.kill(pr.host_pid, signal.SIGCONT)
            except ProcessLookupError:
                continue  # ended meanwhile

    def resume(self, name: str) -> None:
        pid = self._init_pid(name)
        if pid is None:
            return
        expected = self._expected.get(name, Expected([], [], [], None, ""))
        self._resume(tree(pid), expected.stopped)

    def _slurmd_answers(self, name: str, expected: Expected) -> str:
        """Ask the restored slurmd for its status (checks.py); raise unless the slurmd
        of the dump answers. A few tries: one RPC may meet slurmd busy with another."""
        env = ["-v", f"SLURMD_NODENAME={name}"]
        if expected.slurm_conf:
            env += ["-v", f"SLURM_CONF={expected.slurm_conf}"]
        argv = [*self._lxc("lxc-attach", name), *env, "--", *self.cfg.slurmd_check]
        why = ""
        for attempt in range(SLURMD_TRIES):
            if attempt:
                time.sleep(0.5)
            cp = self._run(argv, timeout=min(self.cfg.timeout_s, 30.0))
            got = checks.slurmd_pid(cp.stdout) if cp.returncode == 0 else None
            if got == expected.slurmd:
                return f"slurmd answered (pid {got})"
            if got is not None:
                why = f"the answer names slurmd pid {got}, not {expected.slurmd}"
            else:
                why = f"exited {cp.returncode}: {(cp.stderr or cp.stdout).strip()[-300:]}"
        raise NotVerifiedError(
            f"{name}: slurmd does not answer after the restore "
            f"({' '.join(self.cfg.slurmd_check)} {why})"
        )

    def kill(self, name: str) -> None:
        if self._state(name) != "RUNNING":
            return
        cp = self._run(self._lxc("lxc-stop", name, "-k"), timeout=self.cfg.timeout_s)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._state(name) == "RUNNING":
            time.sleep(0.2)
        if self._state(name) == "RUNNING":
            raise BackendError(f"lxc-stop -k {name} left it running: {cp.stderr.strip()}")

    def commit(self, name: str, images: Path) -> None:
        self._expected.pop(name, None)
        shutil.rmtree(images, ignore_errors=True)
