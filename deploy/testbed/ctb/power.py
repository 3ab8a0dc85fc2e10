"""Power model daemon: every second, each host's watts = idle + slope x busy cores.

Busy cores come from the CPU time (cpuacct) of the LXC containers on the host now
(placement.py: migrations move them) over the
last interval; a host whose chassis was powered off (chassis-control wrote 0) reads
its standby watts. The result goes to BMC_DIR/HOST/watts, which both the BMC's Watts
sensor and the DCMI module read. Each tick also makes the hosts' containers follow their
chassis (chassis.py: powered off, they stop; powered on, they start again).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from . import chassis, paths, placement
from .topology import Topology

CGROUP_ROOTS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct"))


def container_cpu_ns(name: str) -> int | None:
    """Cumulative CPU nanoseconds of a container, or None when it is not running."""
    for root in CGROUP_ROOTS:
        f = root / f"lxc.payload.{name}" / "cpuacct.usage"
        try:
            return int(f.read_text())
        except (OSError, ValueError):
            continue
    # cgroup v2 fallback: cpu.stat usage_usec
    f = Path("/sys/fs/cgroup/unified") / f"lxc.payload.{name}" / "cpu.stat"
    try:
        for line in f.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) * 1000
    except (OSError, ValueError):
        pass
    return None


def watts(topo: Topology, busy_cores: float, powered: bool) -> float:
    if not powered:
        return topo.power.standby_w
    return topo.power.idle_w + topo.power.per_core_w * busy_cores


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def serve(topo: Topology, interval: float = 1.0, max_seconds: float = 7 * 24 * 3600) -> None:
    """Run until SIGTERM (or max_seconds, a bound so it can never outlive a week)."""
    stop = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    hosts = [h.name for h in topo.hosts()]
    last: dict[str, int | None] = {c.name: container_cpu_ns(c.name) for c in topo.containers()}
    last_t = time.monotonic()
    end = last_t + max_seconds
    # a host's containers follow its chassis: off stops them, on starts them (chassis.py)
    follower = chassis.Follower(topo, paths.LOG / "powerd.log")
    while not stop and time.monotonic() < end:
        time.sleep(interval)
        follower.tick()
        now = time.monotonic()
        dt = max(now - last_t, 1e-3)
        last_t = now
        on = placement.by_host(topo)  # where each node runs now (migrations move them)
        for host in hosts:
            busy = 0.0
            for name in on.get(host, []):
                cur = container_cpu_ns(name)
                prev = last.get(name)
                if cur is not None and prev is not None and cur >= prev:
                    busy += (cur - prev) / 1e9 / dt
                last[name] = cur
            d = paths.BMC / host
            try:
                powered = (d / "power").read_text().strip() != "0"
            except OSError:
                powered = True
            if d.is_dir():
                _write_atomic(d / "watts", f"{round(watts(topo, busy, powered))}\n")
                _write_atomic(d / "busy", f"{busy:.3f}\n")
