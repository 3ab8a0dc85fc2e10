"""Memory intensity per container from hardware counters (perf_event_open, cgroup mode).

Manual equivalent: ``perf stat -e instructions,LLC-load-misses -G CGROUP -a sleep 1``.
Intensity = off-chip requests (LLC misses + hardware prefetch requests where the CPU
exposes them) per 1000 instructions: the miss-rate metric of DI/DINO (Blagodurov,
thesis §2.3/§3.3). Where the kernel or VM gives no hardware PMU the reader says
``unsupported`` with the reason and never invents a value; tests and hosts without a
PMU can replay recorded counters (:class:`RecordedCounters`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

PERF_TYPE_HARDWARE = 0
PERF_TYPE_RAW = 4
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
_NR_PERF_EVENT_OPEN = 298  # x86_64
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7 and below fit; zero-filled
_DISABLED = 1 << 0


@dataclass(frozen=True)
class EventSpec:
    type: int
    config: int


# Event table per CPU vendor (/proc/cpuinfo vendor_id). LLC misses use the generic
# cache-misses event (the kernel maps it per model); prefetch requests need a
# model-specific raw code: MODEL_EVENTS below for the models whose event lists we
# checked, a raw override (perf.raw_events.prefetches) for any other.
EVENT_TABLE: dict[str, dict[str, EventSpec]] = {
    "GenuineIntel": {
        "instructions": EventSpec(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
        "llc_misses": EventSpec(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
    },
    "AuthenticAMD": {
        "instructions": EventSpec(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
        "llc_misses": EventSpec(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES),
    },
}
GENERIC = EVENT_TABLE["GenuineIntel"]

# Hardware prefetch requests per (vendor, family, models; empty = the whole family). A raw
# code is umask << 8 | event. Thesis §5.4 counts off-chip requests as LLC misses plus
# hardware prefetches; where the vendor has no "prefetch that left the chip" event, the
# closest is the L2 prefetch miss (some of which hit the L3: an upper estimate).
_SKYLAKE = frozenset({0x4E, 0x5E, 0x55, 0x8E, 0x9E})
_HASWELL = frozenset({0x3C, 0x3F, 0x45, 0x46})
MODEL_EVENTS: tuple[tuple[str, int, frozenset[int], dict[str, EventSpec]], ...] = (
    # AMD family 17h (Zen, Zen 2): l2_pf_miss_l2_l3, event 0x72 umask 0xff, L2 prefetches
    # that miss both L2 and L3, i.e. go to memory.
    ("AuthenticAMD", 0x17, frozenset(), {"prefetches": EventSpec(PERF_TYPE_RAW, 0xFF72)}),
    # Intel Skylake / Cascade Lake (SDM vol. 3B table 19-3): L2_RQSTS.PF_MISS, 24H/38H.
    ("GenuineIntel", 6, _SKYLAKE, {"prefetches": EventSpec(PERF_TYPE_RAW, 0x3824)}),
    # Intel Haswell (SDM vol. 3B table 19-11): L2_RQSTS.L2_PF_MISS, 24H/30H.
    ("GenuineIntel", 6, _HASWELL, {"prefetches": EventSpec(PERF_TYPE_RAW, 0x3024)}),
)


@dataclass(frozen=True)
class Cpu:
    vendor: str
    family: int | None
    model: int | None


class UnsupportedError(Exception):
    """No counters for this container on this host; the message is the reason."""


@dataclass(frozen=True)
class Counts:
    """Cumulative counter values of one container."""

    instructions: int
    llc_misses: int
    prefetches: int = 0


def mpki(before: Counts, after: Counts) -> float:
    """Off-chip requests per 1000 instructions between two readings; 0 when idle."""
    d_instr = after.instructions - before.instructions
    d_req = (after.llc_misses - before.llc_misses) + (after.prefetches - before.prefetches)
    if d_instr < 0 or d_req < 0:
        raise ValueError("counters went backwards (a restarted counter): skip this interval")
    if d_instr == 0:
        return 0.0
    return 1000.0 * d_req / d_instr


def event_table(cpu: Cpu | str, raw: dict[str, str]) -> dict[str, EventSpec]:
    """The vendor's events, the model's where known, then the config's raw overrides
    (``0x412e``)."""
    if isinstance(cpu, str):
        cpu = Cpu(cpu, None, None)
    table = dict(EVENT_TABLE.get(cpu.vendor, GENERIC))
    for vendor, family, models, events in MODEL_EVENTS:
        if (vendor, family) == (cpu.vendor, cpu.family) and (not models or cpu.model in models):
            table.update(events)
    for name, code in raw.items():
        table[name] = EventSpec(PERF_TYPE_RAW, int(code, 0))
    return table


def cpu_vendor(cpuinfo: str) -> str:
    return cpu_of(cpuinfo).vendor


def cpu_of(cpuinfo: str) -> Cpu:
    """Vendor, family and model of the first processor in /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def number(key: str) -> int | None:
        text = fields.get(key, "")
        return int(text) if text.isdigit() else None

    return Cpu(fields.get("vendor_id", "unknown"), number("cpu family"), number("model"))


class CounterSource(Protocol):
    def read(self, container: str, cgroup: Path | None) -> Counts: ...

    def forget(self, container: str) -> None: ...


def _attr(spec: EventSpec, leader: bool) -> bytes:
    # struct perf_event_attr: type u32, size u32, config u64, sample_period u64,
    # sample_type u64, read_format u64, flags u64 (bit 0 = disabled), ...
    read_format = PERF_FORMAT_GROUP
    flags = _DISABLED if leader else 0
    head = struct.pack("=IIQQQQQ", spec.type, _ATTR_SIZE, spec.config, 0, 0, read_format, flags)
    return head + bytes(_ATTR_SIZE - len(head))


class PerfCounters:
    """Reads one counter group per CPU per container cgroup (perf cgroup mode)."""

    def __init__(self, events: dict[str, EventSpec], perf_cgroup_root: Path | None) -> None:
        self.events = events
        self.root = perf_cgroup_root
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fds: dict[str, list[list[int]]] = {}  # container -> per CPU [leader, ...]
        self.cpus = os.cpu_count() or 1

    def _open(self, spec: EventSpec, cgroup_fd: int, cpu: int, group: int, lead: bool) -> int:
        attr = ctypes.create_string_buffer(_attr(spec, lead), _ATTR_SIZE)
        fd = int(
            self._libc.syscall(
                _NR_PERF_EVENT_OPEN, attr, cgroup_fd, cpu, group, PERF_FLAG_PID_CGROUP
            )
        )
        if fd < 0:
            err = ctypes.get_errno()
            name = errno.errorcode.get(err, str(err))
            hint = " (no hardware PMU exposed by this kernel or VM)" if err == errno.ENOENT else ""
            raise UnsupportedError(
                f"perf_event_open(type={spec.type}, config={spec.config:#x}) failed: {name}{hint}"
            )
        return fd

    def probe(self) -> None:
        """Raise UnsupportedError with the reason when this host cannot count at all."""
        if self.root is None:
            raise UnsupportedError(
                "no perf_event cgroup hierarchy (v1 perf_event or v2) is mounted"
            )
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            probe = self._open(self.events["instructions"], fd, 0, -1, True)
            os.close(probe)
        finally:
            os.close(fd)

    def _open_container(self, cgroup: Path) -> list[list[int]]:
        cg = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        groups: list[list[int]] = []
        try:
            for cpu in range(self.cpus):
                fds: list[int] = []
                for i, spec in enumerate(self.events.values()):
                    fds.append(self._open(spec, cg, cpu, fds[0] if i else -1, i == 0))
                groups.append(fds)
                ioctl_enable(fds[0])
        except BaseException:
            for fds in groups:
                for fd in fds:
                    os.close(fd)
            raise
        finally:
            os.close(cg)
        return groups

    def read(self, container: str, cgroup: Path | None) -> Counts:
        if cgroup is None:
            raise UnsupportedError("container has no perf_event cgroup")
        if container not in self._fds:
            self._fds[container] = self._open_container(cgroup)
        totals = dict.fromkeys(self.events, 0)
        for fds in self._fds[container]:
            data = os.read(fds[0], 8 * (1 + len(fds)))
            values = struct.unpack(f"={1 + len(fds)}Q", data)[1:]
            for name, v in zip(self.events, values, strict=True):
                totals[name] += v
        return Counts(totals["instructions"], totals["llc_misses"], totals.get("prefetches", 0))

    def forget(self, container: str) -> None:
        for fds in self._fds.pop(container, []):
            for fd in fds:
                os.close(fd)


def ioctl_enable(fd: int) -> None:
    import fcntl  # noqa: PLC0415 (only where counters exist)

    perf_event_ioc_enable = 0x2400
    fcntl.ioctl(fd, perf_event_ioc_enable, 0)


class RecordedCounters:
    """Replays counter readings recorded on a host with a PMU (JSON lines of
    ``{"container": ..., "instructions": ..., "llc_misses": ..., "prefetches": ...}``),
    one line per container per interval, in order."""

    def __init__(self, lines: list[str]) -> None:
        self._queues: dict[str, list[Counts]] = {}
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                counts = Counts(
                    int(doc["instructions"]), int(doc["llc_misses"]), int(doc.get("prefetches", 0))
                )
                name = str(doc["container"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"recorded counters line {n}: {exc}") from exc
            self._queues.setdefault(name, []).append(counts)

    @classmethod
    def from_file(cls, path: Path) -> RecordedCounters:
        return cls(path.read_text(encoding="utf-8").splitlines())

    def read(self, container: str, cgroup: Path | None) -> Counts:
        queue = self._queues.get(container)
        if not queue:  # the recording ended: say so rather than repeat a value
            raise UnsupportedError(f"no recorded counters left for {container}")
        return queue.pop(0)

    def forget(self, container: str) -> None:
        self._queues.pop(container, None)


def perf_cgroup_root(cgroup_root: Path) -> Path | None:
    if (cgroup_root / "perf_event" / "tasks").exists():
        return cgroup_root / "perf_event"
    # perf_event is an implicit controller of cgroup v2: every v2 cgroup can be counted.
    for unified in (cgroup_root / "unified", cgroup_root):
        if (unified / "cgroup.controllers").exists():
            return unified
    return None
