"""A host's power, followed by its node containers (issue 17; docs/testbed.md, "Power").

The BMCs are emulated (bmc.py): `chassis power off|on` only flips BMC_DIR/HOST/power,
and `chassis power soft` only logs a shutdown request. On real hardware a host that
loses power takes its node containers (and their slurmd) with it, and a host powered on
boots them again. powerd (power.py) makes the emulation do the same, once a second:

- `soft` (chassis-control writes BMC_DIR/HOST/shutdown): the host's containers stop
  cleanly (lxc-stop, their PID 1 gets SIGTERM), then the chassis goes off, as an OS
  that has shut down switches its power supply off (ACPI soft-off);
- `off`: the host's containers are killed (lxc-stop -k): the power is cut;
- `on`: the containers recorded on the host (placement.py) start again, except those
  Slurm has suspended (its SuspendProgram, below): a node Slurm powered down stays down
  until Slurm resumes it.

Slurm's power saving reaches a node through `clavis-testbed node-power stop NODE` and
`node-power start NODE HOST` (the site command clavisd runs, docs/clavisd.md, "Slurm
power saving"): stop marks the node suspended (SUSPENDED/NODE) and stops its container
cleanly; start refuses a host that is off, records the node on HOST (the migrators'
network hook: route, monitor socket, include files), clears the mark and starts the
container in HOST's netns. The testbed's monitors and migrators keep running on a host
that is off (they are the head's view of the host, not part of the emulated machine);
clavisd knows the host is off from its BMC.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import containers, paths, placement
from .proc import CommandError, run
from .topology import Topology

SUSPENDED = paths.RUN / "power" / "suspended"  # SUSPENDED/NODE: Slurm powered it down
STOP_TIMEOUT_S = 10  # lxc-stop's clean stop; then the container is killed
# A resumed node "boots" this long before its container starts (a real machine takes a
# minute). slurmctld takes a node it resumed as booted only when the boot time it derives
# (its clock's whole seconds minus slurmd's uptime, which the kernel rounds up) is not
# before the resume request (node_mgr.c, waiting_for_node_boot): that derivation can put
# the boot up to 2 s early, so the container must start more than 2 s after the request.
BOOT_S = 2.5


def powered(host: str) -> bool:
    """What the host's chassis-control state says (a missing file: on, as at up)."""
    try:
        return (paths.BMC / host / "power").read_text().strip() != "0"
    except OSError:
        return True


def suspended(node: str) -> bool:
    return (SUSPENDED / node).exists()


def expected_down(node: str) -> bool:
    """A node whose container is meant to be stopped: Slurm suspended it, or the host it
    is recorded on is powered off (the testbed's health check skips it)."""
    return suspended(node) or not powered(placement.host_of(node))


def _set_power(host: str, on: bool) -> None:
    d = paths.BMC / host
    tmp = d / "power.tmp"
    tmp.write_text("1\n" if on else "0\n")
    tmp.replace(d / "power")


def stop_node(name: str, clean: bool) -> list[str]:
    """Stop one node's container: cleanly (bounded, then killed) or killed; errors."""
    if clean and containers.init_pid(name) is not None:
        run(containers.lxc_cmd("lxc-stop", name, "-t", str(STOP_TIMEOUT_S)), check=False,
            timeout=STOP_TIMEOUT_S + 20)  # fmt: skip
    return containers.stop(name)


def start_node(topo: Topology, name: str, host: str) -> None:
    """Start a stopped node's container on ``host`` (its record follows)."""
    if not powered(host):
        raise CommandError(f"host {host} is powered off: no node starts on it")
    if containers.state(name) == "RUNNING":
        if placement.host_of(name) != host:
            raise CommandError(f"{name} runs on {placement.host_of(name)}, not {host}")
        (SUSPENDED / name).unlink(missing_ok=True)
        return
    if placement.host_of(name) != host:
        placement.hook(topo, "restored", name, host)
    (SUSPENDED / name).unlink(missing_ok=True)
    time.sleep(BOOT_S)
    containers.start_on(name, host, fresh_boot=True)


def suspend_node(name: str) -> list[str]:
    SUSPENDED.mkdir(parents=True, exist_ok=True)
    (SUSPENDED / name).write_text(f"{time.time():.3f}\n")
    return stop_node(name, clean=True)


class Follower:
    """powerd's side of the emulation: each host's containers follow its chassis."""

    def __init__(self, topo: Topology, log: Path) -> None:
        self.topo = topo
        self.log = log
        self.last = {h.name: powered(h.name) for h in topo.hosts()}
        self.threads: dict[str, threading.Thread] = {}

    def _say(self, msg: str) -> None:
        with contextlib.suppress(OSError), open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    def tick(self) -> None:
        """Start at most one action per host; a host whose last action still runs waits
        for the next tick (its state is read again then)."""
        for host in self.last:
            t = self.threads.get(host)
            if t is not None and t.is_alive():
                continue
            request = paths.BMC / host / "shutdown"
            on = powered(host)
            if request.exists() and on:
                request.unlink(missing_ok=True)
                self._begin(host, self._soft, "soft")
            elif request.exists():
                request.unlink(missing_ok=True)
            elif self.last[host] and not on:
                self._begin(host, self._cut, "off")
            elif on and not self.last[host]:
                self._begin(host, self._boot, "on")

    def _begin(self, host: str, action: Callable[[str], None], what: str) -> None:
        self.last[host] = what == "on"  # soft ends with the chassis off too
        t = threading.Thread(target=self._guarded, args=(host, action, what), daemon=True)
        self.threads[host] = t
        t.start()

    def _guarded(self, host: str, action: Callable[[str], None], what: str) -> None:
        try:
            action(host)
        except Exception as exc:  # the edge of this thread: log it, powerd goes on
            self._say(f"host={host} power {what} failed: {exc}")

    def _nodes(self, host: str) -> list[str]:
        return placement.by_host(self.topo).get(host, [])

    def _soft(self, host: str) -> None:
        errors = [e for n in self._nodes(host) for e in stop_node(n, clean=True)]
        _set_power(host, False)
        self._say(f"host={host} soft: containers stopped, chassis off {errors or ''}")

    def _cut(self, host: str) -> None:
        errors = [e for n in self._nodes(host) for e in stop_node(n, clean=False)]
        self._say(f"host={host} off: containers killed {errors or ''}")

    def _boot(self, host: str) -> None:
        started = []
        for n in self._nodes(host):
            if suspended(n) or containers.state(n) == "RUNNING":
                continue
            containers.start_on(n, host, fresh_boot=True)
            started.append(n)
        self._say(f"host={host} on: started {started}")
