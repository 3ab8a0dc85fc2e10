"""Emulated per-container miss counters: the PMU this machine lacks, like the BMCs.

The development machine has no hardware counters (every perf event is unsupported), so
the testbed emulates what `perf stat -e instructions,cache-misses -G CGROUP` would count
for each node container, driven by what the container's processes really do:

    instructions += cpu_s * instructions_per_cpu_s
    llc_misses   += cpu_s * misses_per_cpu_s(program)

summed over the container's processes, where ``cpu_s`` is a process's CPU time (user +
system, /proc/PID/stat) since the last tick and ``program`` its command name (``comm``).
A profile file declares misses per CPU-second per program (shell patterns, first match
wins; others get the default). So a devil that runs reads high, the same devil stopped
(SIGSTOP) or idle adds nothing, and the miss rate the monitor derives (misses per 1000
instructions, DI/DINO's metric) is the CPU-time-weighted mix of what ran.

Every quarter second (``missd``, started by `up`; TICK_S), each container's cumulative counts go to
``RUN/misses/NAME.json``; the monitor reads that directory only when its configuration
names it (``[emulation] miss_counters_dir``) and labels the values ``emulated``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import paths
from .topology import Topology

DIR = paths.RUN / "misses"
PROFILES = DIR / "profiles.toml"
FORMAT = "clavis-testbed.misses/1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUACCT = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct"))
MAX_PROCS = 100_000  # processes read per container per tick (a bound, far above real use)
# a tick every quarter second: the stack's monitors sample every half second
# (stack.MONITOR_INTERVAL_S), and an interval that saw no tick would read 0 misses
TICK_S = 0.25

DEFAULT_PROFILES = """\
# Emulated miss counters of the testbed (docs/testbed.md, "Emulated miss counters").
# Re-read by missd when it changes. Keys of [programs] are shell patterns matched
# against a process's command name (comm, at most 15 characters); the first match wins.

instructions_per_cpu_s = 1.0e9     # every program: 1 instruction per ns of CPU time
default_misses_per_cpu_s = 5.0e5   # programs not listed: 0.5 misses per 1000 instructions

[programs]                         # misses per CPU-second while the program runs
"stream*" = 4.0e7                  # 40 per 1000 instructions: a memory-streaming devil
"""


class ProfileError(ValueError):
    """The profile file is unusable; the message names the key and value."""


@dataclass(frozen=True)
class Profiles:
    instructions_per_cpu_s: float = 1.0e9
    default_misses_per_cpu_s: float = 5.0e5
    programs: tuple[tuple[str, float], ...] = ()

    def misses_per_cpu_s(self, comm: str) -> float:
        for pattern, rate in self.programs:
            if fnmatch.fnmatchcase(comm, pattern):
                return rate
        return self.default_misses_per_cpu_s


def _rate(name: str, value: Any, top: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{name}: expected a number, got {value!r}")
    if not 0 <= value <= top:
        raise ProfileError(f"{name}: {value!r} is not within 0..{top:g}")
    return float(value)


def parse_profiles(text: str) -> Profiles:
    """Profiles from the TOML text; ProfileError names the first bad key."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"not TOML: {exc}") from exc
    unknown = set(doc) - {"instructions_per_cpu_s", "default_misses_per_cpu_s", "programs"}
    if unknown:
        raise ProfileError(f"unknown key(s) {sorted(unknown)}")
    ips = _rate("instructions_per_cpu_s", doc.get("instructions_per_cpu_s", 1.0e9), 1e12)
    if ips <= 0:
        raise ProfileError("instructions_per_cpu_s: must be > 0")
    default = _rate("default_misses_per_cpu_s", doc.get("default_misses_per_cpu_s", 5.0e5), ips)
    programs = doc.get("programs", {})
    if not isinstance(programs, dict):
        raise ProfileError("programs: expected a table of pattern = misses per CPU-second")
    rates = tuple((str(k), _rate(f"programs.{k!r}", v, ips)) for k, v in programs.items())
    return Profiles(ips, default, rates)


@dataclass(frozen=True)
class ProcTime:
    """One process's identity (pid, start time) and its CPU time so far."""

    pid: int
    start: int
    comm: str
    cpu_s: float


def parse_stat(pid: int, text: str) -> ProcTime:
    """A /proc/PID/stat line: comm is between the first '(' and the last ')'; after it,
    utime and stime are fields 14 and 15 and starttime 22 (proc(5))."""
    open_, close = text.index("("), text.rindex(")")
    rest = text[close + 2 :].split()
    utime, stime, start = int(rest[11]), int(rest[12]), int(rest[19])
    return ProcTime(pid, start, text[open_ + 1 : close], (utime + stime) / CLK_TCK)


def container_cgroup(name: str) -> Path | None:
    """The container's cgroup in the cpuacct hierarchy (LXC 4+ names it lxc.payload.NAME)."""
    for root in CPUACCT:
        top = root / f"lxc.payload.{name}"
        if top.is_dir():
            return top
    return None


def cgroup_pids(top: Path | None) -> list[int]:
    """Pids in the cgroup ``top`` and every cgroup below it."""
    pids: list[int] = []
    if top is None:
        return pids
    for d, _dirs, _files in os.walk(top):
        try:
            pids += [int(p) for p in (Path(d) / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            continue
        if len(pids) >= MAX_PROCS:
            break
    return pids[:MAX_PROCS]


def read_procs(pids: Iterable[int]) -> list[ProcTime]:
    out = []
    for pid in pids:
        try:
            out.append(parse_stat(pid, Path(f"/proc/{pid}/stat").read_text()))
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return out


@dataclass
class Counter:
    """One container's cumulative emulated counts and the CPU time last seen per process."""

    instructions: float = 0.0
    llc_misses: float = 0.0
    cpu_s: float = 0.0
    seen: dict[tuple[int, int], float] = field(default_factory=dict)

    def tick(self, procs: list[ProcTime], prof: Profiles, first: bool = False) -> None:
        """Add what ``procs`` ran since the last tick. A process not seen before counts
        from its start (it started since), except at the first tick (baseline only)."""
        now: dict[tuple[int, int], float] = {}
        for p in procs:
            key = (p.pid, p.start)
            now[key] = p.cpu_s
            ran = p.cpu_s - self.seen.get(key, p.cpu_s if first else 0.0)
            if ran <= 0:
                continue
            self.cpu_s += ran
            self.instructions += ran * prof.instructions_per_cpu_s
            self.llc_misses += ran * prof.misses_per_cpu_s(p.comm)
        self.seen = now

    def document(self, name: str, wall: float) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "container": name,
            "instructions": int(self.instructions),
            "llc_misses": int(self.llc_misses),
            "prefetches": 0,
            "cpu_s": round(self.cpu_s, 6),
            "updated": wall,
        }


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ProfileFile:
    """The profile file, re-read when its mtime changes; a bad edit keeps the last good
    profiles and says why once in the log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.profiles = Profiles()
        self._mtime = -1.0

    def current(self) -> Profiles:
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return self.profiles
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self.profiles = parse_profiles(self.path.read_text(encoding="utf-8"))
            except (OSError, ProfileError) as exc:
                print(f"missd: {self.path}: {exc}; keeping the previous profiles", flush=True)
        return self.profiles


def serve(topo: Topology, interval: float = TICK_S, max_seconds: float = 7 * 24 * 3600) -> None:
    """Run until SIGTERM (or max_seconds, a bound so it can never outlive a week)."""
    stop = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    DIR.mkdir(parents=True, exist_ok=True)
    if not PROFILES.exists():
        _write_atomic(PROFILES, DEFAULT_PROFILES)
    profiles = ProfileFile(PROFILES)
    names = [c.name for c in topo.containers()]
    counters = {n: Counter() for n in names}
    first = True
    end = time.monotonic() + max_seconds
    while not stop and time.monotonic() < end:
        prof = profiles.current()
        for n in names:
            counters[n].tick(read_procs(cgroup_pids(container_cgroup(n))), prof, first)
            try:
                _write_atomic(DIR / f"{n}.json", json.dumps(counters[n].document(n, time.time())))
            except OSError as exc:  # the run directory going away under `down`: say it, go on
                print(f"missd: {n}: {exc}", flush=True)
        first = False
        time.sleep(interval)
