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

The container's configuration and root filesystem must exist on the target under the
same lxcpath (shared or provisioned storage); only the CRIU images move.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from clavis_migrator import announce
from clavis_migrator.backend import BackendError, Size
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


@dataclass(frozen=True)
class Proc:
    age_s: float
    ppid: int  # in the container's pid namespace (0 for its init)


def tree(init_pid: int) -> dict[int, Proc]:
    """The container's live processes (zombies excluded), by their pid inside it."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    outer: dict[int, tuple[int, float, int]] = {}  # host pid -> (ns pid, age, host ppid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != ns:
                continue
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if stat[0] in ("Z", "X"):
            continue
        nspid = next(
            (ln.split()[-1] for ln in status.splitlines() if ln.startswith("NSpid:")), entry
        )
        outer[int(entry)] = (int(nspid), uptime - int(stat[19]) / ticks, int(stat[1]))
    return {
        nspid: Proc(age, outer[ppid][0] if ppid in outer else 0)
        for nspid, age, ppid in outer.values()
    }


def must_come_back(procs: dict[int, Proc]) -> list[int]:
    """The pids a restore must bring back: old processes, init and init's children."""
    return sorted(
        p for p, pr in procs.items() if pr.age_s >= LONG_LIVED_S or p == 1 or pr.ppid == 1
    )


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
        self.restore_conf.write_text("".join(f"{o}\n" for o in cfg.restore_options))
        # per container restored here: the in-namespace pids that must be back
        self._expected: dict[str, list[int]] = {}

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
        before = tree(pid)
        long_lived = must_come_back(before)
        (images / TREE_FILE).write_text(
            json.dumps({"processes": len(before), "long_lived": long_lived})
        )
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
            doc = json.loads((images / TREE_FILE).read_text())
            self._expected[name] = [int(p) for p in doc["long_lived"]]
        except (OSError, ValueError, KeyError, TypeError):
            self._expected.pop(name, None)

    def verify(self, name: str) -> str:
        state = self._state(name)
        pid = self._init_pid(name)
        if state != "RUNNING" or pid is None:
            raise BackendError(f"{name} is {state} after the restore")
        now = tree(pid)
        want = self._expected.get(name, [])
        missing = sorted(set(want) - set(now))
        if not now or missing:
            raise BackendError(
                f"{name}: after the restore {len(now)} processes, missing pids {missing} "
                "that ran before the dump"
            )
        said = ""
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
