"""Helpers shared by the testbed integration tests: run the CLI, look at the machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "deploy" / "testbed" / "clavis-testbed"
RUN_DIR = Path("/run/clavis-testbed")


def tb(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run clavis-testbed; on failure the assertion message carries its output."""
    cp = subprocess.run(
        [str(CLI), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check:
        assert cp.returncode == 0, (
            f"clavis-testbed {' '.join(args)} -> {cp.returncode}\n{cp.stderr}"
        )
    return cp


def status() -> dict[str, Any]:
    cp = tb("status", "--json", check=False)
    data: dict[str, Any] = json.loads(cp.stdout)
    return data


def run(argv: list[str], timeout: float = 60, **kw: Any) -> str:
    cp = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
        **kw,
    )
    assert cp.returncode == 0, f"{' '.join(argv)} -> {cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    out: str = cp.stdout
    return out


def slurm(argv: list[str], timeout: float = 60) -> str:
    """A Slurm client command in the head's netns (clavis-testbed exec)."""
    return run([str(CLI), "exec", "--", *argv], timeout=timeout)


def host_of(container: str) -> str:
    """The host a node runs on now: the testbed's record (placement.json, updated by the
    migrators' network hook), else its home host, which its name says (HOSTcN)."""
    try:
        doc = json.loads((RUN_DIR / "placement.json").read_text())
        where = str(doc["nodes"][container])
    except (OSError, ValueError, KeyError, TypeError):
        return container.rsplit("c", 1)[0]
    return where


def netns_prefix(container: str) -> list[str]:
    """argv prefix that runs a command inside a container (lxc-attach from its host's
    netns)."""
    return [
        "nsenter", f"--net=/run/netns/ctb-{host_of(container)}", "--",
        "lxc-attach", "-n", container, "-P", str(RUN_DIR / "lxc"), "--",
    ]  # fmt: skip


def lxc_attach(container: str, shell: str, timeout: float = 60) -> str:
    """Run a shell snippet inside a container."""
    return run([*netns_prefix(container), "sh", "-c", shell], timeout=timeout)


def tc_sent_bytes(netns: str, dev: str) -> int:
    out = run(["tc", "-n", netns, "-s", "qdisc", "show", "dev", dev])
    m = re.search(r"Sent (\d+) bytes", out)
    assert m, out
    return int(m.group(1))


def xrack_bytes(src_rack: int, dst_rack: int) -> int:
    """Bytes counted by the core router's CLAVIS-XRACK rule for one rack pair."""
    out = run(
        ["nsenter", "--net=/run/netns/ctb-core", "--", "iptables", "-w", "5", "-L",
         "CLAVIS-XRACK", "-v", "-x", "-n"]
    )  # fmt: skip
    for line in out.splitlines():
        f = line.split()
        if (
            len(f) >= 9
            and f[-2].endswith(f".{src_rack}.0/24")
            and f[-1].endswith(f".{dst_rack}.0/24")
        ):
            return int(f[1])
    raise AssertionError(f"no CLAVIS-XRACK rule for rack {src_rack} -> {dst_rack}:\n{out}")


def ipmi(host: dict[str, Any], *args: str, timeout: float = 30, netns: str = "") -> str:
    """ipmitool over LAN+ to the host's BMC, from the host's netns (or another one that
    reaches the management network, e.g. the head's)."""
    bmc = host["bmc"]
    password = Path(bmc["password_file"]).read_text().strip()
    return run(
        ["nsenter", f"--net=/run/netns/{netns or bmc['netns']}", "--",
         "ipmitool", "-I", "lanplus", "-H", bmc["address"], "-p", str(bmc["port"]),
         "-U", bmc["user"], "-P", password, "-C", "3", *args],
        timeout=timeout,
    )  # fmt: skip


def dcmi_watts(host: dict[str, Any]) -> int:
    out = ipmi(host, "dcmi", "power", "reading")
    m = re.search(r"Instantaneous power reading:\s+(\d+) Watts", out)
    assert m, out
    return int(m.group(1))


# ------------------------------------------------------------------ machine snapshot


def _lines(argv: list[str]) -> list[str]:
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return sorted(cp.stdout.splitlines())


def _iptables() -> list[str]:
    # counters change with unrelated traffic: compare rules only
    out = []
    for line in _lines(["iptables-save"]):
        if line.startswith("#"):
            continue
        out.append(re.sub(r"\[\d+:\d+\]", "", line))
    return sorted(out)


def _cgroups() -> list[str]:
    root = Path("/sys/fs/cgroup")
    found = []
    for h in root.iterdir():
        if h.is_dir():
            found += [str(p) for p in h.glob("lxc*")]
    return sorted(found)


def snapshot() -> dict[str, list[str]]:
    """What up must not leave behind, as seen from the root namespace."""
    return {
        "netns": sorted(p.name for p in Path("/run/netns").glob("*"))
        if Path("/run/netns").is_dir()
        else [],
        "links": sorted(
            re.sub(r"^\d+: ", "", ln).split()[0] for ln in _lines(["ip", "-o", "link"])
        ),
        "iptables": _iptables(),
        "cgroups": _cgroups(),
        "run_dir": [str(RUN_DIR)] if RUN_DIR.exists() else [],
    }


# What the testbed names its objects (docs/testbed.md): other sessions on the machine
# (the monitor's tests, say) create and remove namespaces, links and cgroups of their
# own while these tests run, so a comparison only counts objects with our names.
_OURS = {
    "netns": re.compile(r"^ctb-"),
    "links": re.compile(r"^(v-r\d|h-r\d|c-r\d|core[:@]|uplink[:@]|br0[:@])"),
    "iptables": re.compile(r"CLAVIS|10\.213\."),
    "cgroups": re.compile(r"/lxc\.(payload|monitor)\.r\d+h\d+c\d+$|/lxc\.pivot$"),
    "run_dir": re.compile(r""),
}


def left_behind(before: dict[str, list[str]]) -> dict[str, list[str]]:
    """Testbed objects present now that were not in the snapshot `before` ({} = none)."""
    now = snapshot()
    extra = {}
    for key, items in now.items():
        new = sorted(i for i in set(items) - set(before[key]) if _OURS[key].search(i))
        if new:
            extra[key] = new
    return extra


def live_pids(pids: list[int]) -> list[int]:
    """PIDs that still exist and are not zombies (PID 1 here reaps late)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            out.append(pid)
    return out


def is_root() -> bool:
    return os.geteuid() == 0


# what sinfo -h -o %T prints for a node that takes jobs (no DOWN, DRAIN, NOT_RESPONDING
# or POWER flag: those print as other words or with a '*', '~', '#' or '%' suffix)
_USABLE = {"idle", "mixed", "allocated"}


def node_states(names: list[str]) -> dict[str, str]:
    out = slurm(["sinfo", "-N", "-h", "-n", ",".join(names), "-o", "%N %T"])
    return dict(line.split() for line in out.splitlines() if line.strip())


def recover_nodes(timeout: float = 90.0) -> list[str]:
    """What an admin does after a cut link comes back, for a test that cut it: resume the
    nodes slurmctld set DOWN as "Not responding" (it stops pinging a node once it is
    down, and a slurmd that kept running never registers again by itself), then wait,
    bounded, until they take jobs. Returns the nodes still unusable rather than raising:
    it runs in a test's cleanup, where it must not hide the test's own failure (a Slurm
    command that itself fails still raises, as everywhere in these helpers)."""
    out = slurm(["sinfo", "-N", "-h", "-o", "%N|%T|%E"])
    down = []
    for line in out.splitlines():
        name, state, reason = [*line.split("|"), "", ""][:3]
        if state.startswith("down") and reason.startswith("Not responding"):
            down.append(name)
    for name in sorted(set(down)):
        slurm(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
    deadline = time.monotonic() + timeout
    left = sorted(set(down))
    while left and time.monotonic() < deadline:
        states = node_states(left)
        left = [n for n in left if states.get(n) not in _USABLE]
        if left:
            time.sleep(1.0)
    return left


def nodes_usable(names: list[str], timeout: float = 120.0) -> None:
    """Wait, bounded, until slurmctld would start a job on every node of ``names``.

    An earlier test may have left one of them out of service (a cut link or a powered-off
    host: NOT_RESPONDING until slurmctld's next ping answers, or DOWN for good once that
    lasted past SlurmdTimeout, which recover_nodes mends). The failure names each node's
    state and slurmctld's lines about it."""
    deadline = time.monotonic() + timeout
    states = node_states(names)
    while time.monotonic() < deadline:
        if all(states.get(n) in _USABLE for n in names):
            return
        time.sleep(1.0)
        states = node_states(names)
    if all(states.get(n) in _USABLE for n in names):
        return
    shown = [slurm(["scontrol", "show", "node", n]) for n in names if states.get(n) not in _USABLE]
    log = RUN_DIR / "log" / "slurmctld.log"
    said = [
        line
        for line in (log.read_text(errors="replace").splitlines() if log.exists() else [])
        if any(n in line for n in names) and "select/" not in line
    ]
    raise AssertionError(
        f"nodes not usable after {timeout:.0f} s: {states}\n"
        + "\n".join(shown)
        + "\n"
        + "\n".join(said[-40:])
    )
