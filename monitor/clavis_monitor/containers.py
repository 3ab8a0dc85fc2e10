"""Which containers run on this host, their cgroups, and their CPU and memory use.

Manual equivalent: ``lxc-ls -f -P LXCPATH`` and ``ls /sys/fs/cgroup/*/lxc.payload.*``.
A container is found by its cgroup (a child of a configured prefix in any hierarchy,
v1 or v2); its LXC config (under a configured lxcpath) adds its addresses. LXD and
Incus instances come from their REST API (:mod:`clavis_monitor.lxd`) with their cgroups
and addresses, and replace what the scan found in the same cgroups. Reading a
vanished container's files raises :class:`VanishedError`; the caller drops it from that
sample and counts it.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from clavis_monitor import lxd
from clavis_monitor.config import ContainersConfig

# v1 hierarchies the monitor reads, and the v2 mount (all controllers in one).
V1_CONTROLLERS = ("cpuacct", "memory", "cpuset", "perf_event")
UNLIMITED_BYTES = 2**60
_JOB_DIR = re.compile(r"^job_(\d+)$")
_STEPD = re.compile(r"^slurmstepd: \[(\d+)")  # the title slurmstepd gives itself
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_IPV4 = re.compile(r"^lxc\.net\.\d+\.ipv4\.address\s*=\s*([0-9.]+)")


class VanishedError(Exception):
    """The container's cgroup disappeared while it was being read."""


@dataclass(frozen=True)
class Container:
    name: str
    source: Literal["lxc", "cgroup", "lxd", "incus"]
    cgroups: dict[str, Path] = field(hash=False)  # controller ("unified" for v2) -> dir
    addresses: tuple[str, ...] = ()


def _read(path: Path | str) -> str:
    """A small cgroup file, read with one open and one read (the CPU sampler reads one
    per container every interval: no buffered text I/O)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 65536).decode("ascii", "replace")
        finally:
            os.close(fd)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError) as exc:
        raise VanishedError(str(path)) from exc


def cpuset_count(text: str) -> int:
    """Number of CPUs in a cpuset list like ``0-3,8,10-11``."""
    n = 0
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def lxc_addresses(config_text: str) -> tuple[str, ...]:
    """IPv4 addresses in an LXC config (``lxc.net.N.ipv4.address = A/len``)."""
    found = []
    for line in config_text.splitlines():
        m = _IPV4.match(line.strip())
        if m:
            found.append(m.group(1))
    return tuple(found)


def _hierarchies(root: Path) -> dict[str, Path]:
    found = {c: root / c for c in V1_CONTROLLERS if (root / c / "tasks").exists()}
    for unified in (root / "unified", root):
        if (unified / "cgroup.controllers").exists():
            found["unified"] = unified
            break
    return found


def _children(hier: Path, prefix: str) -> dict[str, Path]:
    """Containers under one hierarchy: ``lxc.payload.`` style prefixes name siblings,
    ``lxc/`` style prefixes (ending in /) name a parent directory."""
    out: dict[str, Path] = {}
    if prefix.endswith("/"):
        parent = hier / prefix.rstrip("/")
        if parent.is_dir():
            for d in parent.iterdir():
                if d.is_dir() and _NAME_OK.match(d.name):
                    out[d.name] = d
        return out
    try:
        entries = list(os.scandir(hier))
    except FileNotFoundError:
        return out
    for e in entries:
        if e.is_dir() and e.name.startswith(prefix):
            name = e.name[len(prefix) :]
            if _NAME_OK.match(name):
                out[name] = Path(e.path)
    return out


def include_patterns(cfg: ContainersConfig) -> tuple[str, ...]:
    """``include``, or the patterns of ``include_file`` when set (read now: whoever
    moves containers between hosts rewrites it). A file that cannot be read includes
    nothing: a container must not be reported by a host it may have left."""
    if not cfg.include_file:
        return cfg.include
    try:
        text = Path(cfg.include_file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    lines = (ln.split("#", 1)[0].strip() for ln in text.splitlines())
    return tuple(ln for ln in lines if ln)


def discover(cfg: ContainersConfig, lxd_states: dict[str, str] | None = None) -> list[Container]:
    """The containers whose cgroups exist now, with their LXC addresses where known,
    and the LXD/Incus instances of the sockets in ``cfg.lxd_sockets`` (which replace
    what the scan found in the same cgroups). ``lxd_states`` gets each present socket's
    state: ``ok`` or why not."""
    hierarchies = _hierarchies(Path(cfg.cgroup_root))
    cgroups: dict[str, dict[str, Path]] = {}
    for controller, hier in hierarchies.items():
        for prefix in cfg.scan_prefixes:
            for name, path in _children(hier, prefix).items():
                cgroups.setdefault(name, {})[controller] = path
    patterns = include_patterns(cfg)
    wanted = [n for n in cgroups if any(fnmatch.fnmatchcase(n, pat) for pat in patterns)]
    api = [
        c
        for c in _api_containers(cfg, hierarchies, {} if lxd_states is None else lxd_states)
        if any(fnmatch.fnmatchcase(c.name, pat) for pat in patterns)
    ]
    taken = {d for c in api for d in c.cgroups.values()}
    result = {c.name: c for c in api}
    for name in wanted:
        if name in result or taken.intersection(cgroups[name].values()):
            continue
        source: Literal["lxc", "cgroup"] = "cgroup"
        addresses: tuple[str, ...] = ()
        for lxc_path in cfg.lxc_paths:
            conf = Path(lxc_path) / name / "config"
            try:
                addresses = lxc_addresses(conf.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            source = "lxc"
            break
        result[name] = Container(name, source, cgroups[name], addresses)
    return [result[n] for n in sorted(result)]


def _api_containers(
    cfg: ContainersConfig, hierarchies: dict[str, Path], states: dict[str, str]
) -> list[Container]:
    """Running LXD/Incus container instances with the cgroups of their init. An absent
    socket is no error and has no state; the first socket to list an instance wins."""
    out: dict[str, Container] = {}
    for sock in cfg.lxd_sockets:
        if not os.path.exists(sock):
            states.pop(sock, None)
            continue
        try:
            found = lxd.instances(sock, cfg.lxd_timeout_s)
        except lxd.LxdError as exc:
            states[sock] = f"unavailable: {exc}"
            continue
        states[sock] = "ok"
        for inst in found:
            dirs = lxd.cgroups_of(inst.pid, hierarchies)
            if dirs and inst.name not in out:
                out[inst.name] = Container(inst.name, inst.engine, dirs, inst.addresses)
    return list(out.values())


def _cpu_file(c: Container) -> tuple[str, bool]:
    """The file with the container's cumulative CPU time, and whether it is v2's cpu.stat."""
    if "cpuacct" in c.cgroups:
        return f"{c.cgroups['cpuacct']}/cpuacct.usage", False
    if "unified" in c.cgroups:
        return f"{c.cgroups['unified']}/cpu.stat", True
    raise VanishedError(f"{c.name}: no cpuacct or v2 cpu.stat")


def _cpu_value(text: str, v2: bool, path: str) -> int:
    if not v2:
        return int(text)
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) * 1000
    raise VanishedError(f"{path}: no usage_usec")


def cpu_ns(c: Container) -> int:
    """Cumulative CPU time of the container's tasks, in nanoseconds."""
    path, v2 = _cpu_file(c)
    return _cpu_value(_read(path), v2, path)


class CpuTimes:
    """Each container's CPU-time file kept open and re-read with ``pread`` at offset 0
    (cgroup files are regenerated on every read from the start): one system call per
    container and interval, where open/read/close cost about 13 times as much here. A
    removed cgroup answers ENODEV on its open file: the container vanished. Used by the
    CPU sampler's thread only."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[str, int, bool]] = {}  # name -> (path, fd, v2)

    def read(self, c: Container) -> int:
        path, v2 = _cpu_file(c)
        entry = self._open.get(c.name)
        if entry is None or entry[0] != path:
            self.forget(c.name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise VanishedError(path) from exc
            entry = self._open[c.name] = (path, fd, v2)
        try:
            data = os.pread(entry[1], 4096, 0)
        except OSError as exc:  # ENODEV: the cgroup was removed under the open file
            self.forget(c.name)
            raise VanishedError(f"{path}: {exc.strerror}") from exc
        return _cpu_value(data.decode("ascii"), v2, path)

    def forget(self, name: str) -> None:
        entry = self._open.pop(name, None)
        if entry is not None:
            os.close(entry[1])

    def close(self) -> None:
        for name in list(self._open):
            self.forget(name)


def cores(c: Container, host_cores: int) -> int:
    for ctl, fname in (("cpuset", "cpuset.cpus"), ("unified", "cpuset.cpus.effective")):
        if ctl in c.cgroups:
            try:
                n = cpuset_count(_read(c.cgroups[ctl] / fname))
            except VanishedError:
                if not c.cgroups[ctl].exists():
                    raise
                continue
            if n > 0:
                return n
    return host_cores


def memory_limit(c: Container, host_bytes: int) -> int:
    """The container's memory limit (the host's memory when unlimited)."""
    text = ""
    if "memory" in c.cgroups:
        text = _read(c.cgroups["memory"] / "memory.limit_in_bytes").strip()
    elif "unified" in c.cgroups and (c.cgroups["unified"] / "memory.max").exists():
        text = _read(c.cgroups["unified"] / "memory.max").strip()
    if not text or text == "max" or int(text) >= UNLIMITED_BYTES:
        return host_bytes
    return min(int(text), host_bytes)


def _cgroup_dirs(c: Container, max_depth: int) -> list[Path]:
    """The container's cgroup and its descendants (up to ``max_depth`` below it) in the
    hierarchy the CPU time is read from."""
    base = c.cgroups.get("cpuacct") or c.cgroups.get("unified") or next(iter(c.cgroups.values()))
    out, stack = [], [(base, 0)]
    while stack:
        d, depth = stack.pop()
        out.append(d)
        if depth + 1 > max_depth:
            continue
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        stack.extend((Path(e.path), depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
    return out


def _stat(pid: int) -> tuple[str, int] | None:
    """(comm, parent pid) from /proc/PID/stat; None when the process has gone."""
    try:
        text = _read(f"/proc/{pid}/stat")
    except VanishedError:
        return None
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    return head.partition("(")[2], int(fields[1]) if len(fields) > 1 else 0


def slurm_tasks(c: Container, max_depth: int = 5) -> dict[int, set[int]]:
    """Per Slurm job, the processes of its steps inside the container: each
    ``slurmstepd: [JOB.STEP]`` process in the container's cgroups and its descendants
    there. Slurm's proctrack/linuxproc and task/none make no ``job_N`` cgroups (the
    testbed runs so), but every step of a job has its slurmstepd in the container."""
    procs: dict[int, tuple[str, int]] = {}
    for d in _cgroup_dirs(c, max_depth):
        try:
            pids = [int(x) for x in _read(d / "cgroup.procs").split()]
        except (VanishedError, ValueError):
            continue
        for pid in pids:
            st = _stat(pid)
            if st is not None:
                procs[pid] = st
    job_of: dict[int, int] = {}
    for pid, (comm, _ppid) in procs.items():
        if comm != "slurmstepd":
            continue
        try:
            m = _STEPD.match(_read(f"/proc/{pid}/cmdline"))
        except VanishedError:
            continue
        if m:
            job_of[pid] = int(m.group(1))
    out: dict[int, set[int]] = {}
    for pid in procs:
        at, seen = pid, 0
        while at in procs and at not in job_of and seen < len(procs):
            at, seen = procs[at][1], seen + 1  # up the tree, within the container
        if at in job_of:
            out.setdefault(job_of[at], set()).add(pid)
    return out


def jobs_in(c: Container, max_depth: int = 5) -> list[int]:
    """Slurm job ids running in the container, from its cgroups: the fallback when no
    SPANK registration arrived. A job is found by the ``job_N`` cgroups that Slurm's
    proctrack/task cgroup plugins make inside the container, or by its slurmstepd
    processes in the container's cgroups (:func:`slurm_tasks`)."""
    jobs: set[int] = set()
    dirs = _cgroup_dirs(c, max_depth)
    for d in dirs:
        m = _JOB_DIR.match(d.name)
        if m:
            jobs.add(int(m.group(1)))
    jobs.update(slurm_tasks(c, max_depth))
    return sorted(jobs)


def pid_container(pid: int, containers: list[Container], cgroup_root: Path) -> str | None:
    """The container whose cgroups hold process ``pid`` (by ``/proc/PID/cgroup``); None
    for a process of no container or one that has gone."""
    hierarchies = _hierarchies(cgroup_root)
    try:
        text = _read(f"/proc/{pid}/cgroup")
    except VanishedError:
        return None
    paths = {line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2}
    for c in containers:
        for ctl, d in c.cgroups.items():
            hier = hierarchies.get(ctl)
            if hier is None:
                continue
            rel = "/" + d.relative_to(hier).as_posix()
            if any(p == rel or p.startswith(rel + "/") for p in paths):
                return c.name
    return None


def host_memory_bytes() -> int:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def host_cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole host from /proc/stat's first line."""
    with open("/proc/stat", encoding="ascii") as fh:
        parts = [int(x) for x in fh.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return total - idle, total
