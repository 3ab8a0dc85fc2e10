"""BMCs: ipmi_sim per host on the management network, DCMI power reading from our
loadlib module, Watts sensor, chassis control; the watts follow the load of that host's
containers."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from . import tb

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not tb.is_root(), reason="the testbed needs root"),
]


def _host(testbed: dict[str, Any], name: str) -> dict[str, Any]:
    return next(h for h in testbed["hosts"] if h["name"] == name)


def _wait_watts(host: dict[str, Any], pred: Any, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    w = tb.dcmi_watts(host)
    while not pred(w) and time.monotonic() < deadline:
        time.sleep(0.5)
        w = tb.dcmi_watts(host)
    return w


def test_every_bmc_answers_dcmi_with_idle_watts(testbed: dict[str, Any]) -> None:
    power = testbed["topology"]["power"]
    ports = set()
    for h in testbed["hosts"]:
        ports.add(h["bmc"]["port"])
        # idle containers use a sliver of CPU: within a quarter core of idle watts
        w = _wait_watts(h, lambda w: w <= power["idle_w"] + 0.25 * power["per_core_w"])
        assert power["idle_w"] <= w <= power["idle_w"] + 0.25 * power["per_core_w"], (h, w)
        sdr = tb.ipmi(h, "sensor", "reading", "Host Power")
        m = re.search(r"Host Power\s*\|\s*(\d+)", sdr)
        assert m, sdr
        assert abs(int(m.group(1)) - w) <= 2 * 2 + power["per_core_w"]  # M=2 resolution
    assert len(ports) == len(testbed["hosts"])


def test_bmcs_are_on_the_management_network(testbed: dict[str, Any]) -> None:
    """Each host's netns and the head's reach every BMC's own address; the root
    namespace (where they listened before) and the racks' networks do not."""
    prefix = testbed["topology"]["net_prefix"]
    assert testbed["mgmt"]["subnet"] == f"{prefix}.250.0/23"
    head = testbed["head"]["netns"]
    for h in testbed["hosts"]:
        assert h["bmc"]["address"].startswith(f"{prefix}.251.")
        assert h["bmc"]["netns"] == h["netns"]
        assert "Chassis Power is on" in tb.ipmi(h, "chassis", "power", "status")
        assert "Chassis Power is on" in tb.ipmi(h, "chassis", "power", "status", netns=head)
        # the host's own management address is on its veth into that network
        shown = tb.run(["ip", "-n", h["netns"], "-4", "-o", "addr", "show", "dev", "mgmt"])
        assert f" {h['mgmt_ip']}/23 " in shown, shown
    h = testbed["hosts"][0]
    password = Path(h["bmc"]["password_file"]).read_text().strip()
    lan = ["ipmitool", "-I", "lanplus", "-H", h["bmc"]["address"], "-p", str(h["bmc"]["port"]),
           "-U", "admin", "-P", password, "-C", "3", "-N", "1", "-R", "1",
           "chassis", "power", "status"]  # fmt: skip
    for where in ([], tb.netns_prefix(h["containers"][0]["name"])):
        cp = subprocess.run([*where, *lan], capture_output=True, text=True, timeout=30, check=False)
        assert cp.returncode != 0, (where, cp.stdout)


LOAD_S = 8  # each host is loaded this long (bounded inside the containers)


def _burn(host: dict[str, Any]) -> list[subprocess.Popen[bytes]]:
    """One busy loop per container of the host, each ended by `timeout` in its container."""
    burners = []
    for c in host["containers"]:
        argv = [
            "nsenter", f"--net=/run/netns/{host['netns']}", "--",
            "lxc-attach", "-n", c["name"], "-P", str(tb.RUN_DIR / "lxc"), "--",
            "timeout", str(LOAD_S), "sh", "-c", "while :; do :; done",
        ]  # fmt: skip
        burners.append(
            subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return burners


def test_watts_rise_with_that_hosts_load_only(testbed: dict[str, Any]) -> None:
    """Each host in turn: its containers busy, its BMC's watts rise by at least half a
    core's worth while every other BMC stays near idle; then it falls back before the
    next."""
    power = testbed["topology"]["power"]
    # an idle host's containers use a sliver of CPU; the loaded host's two busy loops
    # get at least half a core between them even on a busy 2-core machine (other
    # sessions share it), so the two never overlap
    quiet_max = power["idle_w"] + 0.25 * power["per_core_w"]
    rise = 0.5 * power["per_core_w"]
    hosts = testbed["hosts"]
    assert len(hosts) >= 2
    seen: dict[str, dict[str, int]] = {}
    for loaded in hosts:
        base = _wait_watts(loaded, lambda w: w <= quiet_max)
        burners = _burn(loaded)
        try:
            high = _wait_watts(loaded, lambda w, b=base: w >= b + rise, timeout=LOAD_S)
            others = {h["name"]: tb.dcmi_watts(h) for h in hosts if h is not loaded}
        finally:
            for p in burners:
                p.wait(timeout=LOAD_S + 30)
        seen[loaded["name"]] = {"base": base, "high": high, **others}
        assert high >= base + rise, seen
        assert all(w <= quiet_max for w in others.values()), seen
        after = _wait_watts(loaded, lambda w, b=base: w <= b + 0.25 * power["per_core_w"])
        assert after <= base + 0.25 * power["per_core_w"], (loaded["name"], base, after)
    assert len(seen) == len(hosts)


def _lxc_states(h: dict[str, Any]) -> dict[str, str]:
    """Each of the host's nodes' LXC state, from the host's netns (tb.netns_prefix)."""
    out = {}
    for c in h["containers"]:
        cp = subprocess.run(
            ["nsenter", f"--net=/run/netns/{h['netns']}", "--", "lxc-info", "-n", c["name"],
             "-P", str(tb.RUN_DIR / "lxc"), "-s", "-H"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        out[c["name"]] = cp.stdout.strip() or "ABSENT"
    return out


def _wait_states(h: dict[str, Any], want: str, timeout: float = 30.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states = _lxc_states(h)
    while any(s != want for s in states.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        states = _lxc_states(h)
    return states


def _nodes_run_a_step(h: dict[str, Any], timeout: float = 60.0) -> None:
    """Every node of the host answers slurmctld again: a step runs on each."""
    for c in h["containers"]:
        out = tb.slurm(["srun", "-w", c["name"], "-N1", "-t", "1", "--immediate=50",
                        "hostname"], timeout=timeout)  # fmt: skip
        assert out.strip() == c["name"], out


def test_chassis_power_off_reads_standby_and_stops_the_nodes(testbed: dict[str, Any]) -> None:
    """Issue 17: a powered-off host's containers (their slurmd) stop, as on real hardware,
    and come back on power on (deploy/testbed/ctb/chassis.py)."""
    power = testbed["topology"]["power"]
    h = _host(testbed, "r1h2")
    try:
        tb.ipmi(h, "chassis", "power", "off")
        assert "off" in tb.ipmi(h, "chassis", "power", "status")
        w = _wait_watts(h, lambda w: w == power["standby_w"])
        assert w == power["standby_w"]
        states = _wait_states(h, "STOPPED")
        assert set(states.values()) == {"STOPPED"}, states
        assert tb.status()["up"], "a powered-off host's stopped nodes are not a problem"
    finally:
        tb.ipmi(h, "chassis", "power", "on")
    assert "on" in tb.ipmi(h, "chassis", "power", "status")
    assert _wait_watts(h, lambda w: w >= power["idle_w"]) >= power["idle_w"]
    states = _wait_states(h, "RUNNING")
    assert set(states.values()) == {"RUNNING"}, states
    _nodes_run_a_step(h)


def test_chassis_power_soft_stops_the_nodes_then_the_chassis(testbed: dict[str, Any]) -> None:
    """`chassis power soft` asks the OS to shut down: the containers stop cleanly, then
    the chassis goes off (ACPI soft-off); power on boots them again."""
    power = testbed["topology"]["power"]
    h = _host(testbed, "r2h1")
    try:
        tb.ipmi(h, "chassis", "power", "soft")
        deadline = time.monotonic() + 30
        while "off" not in tb.ipmi(h, "chassis", "power", "status"):
            assert time.monotonic() < deadline, "chassis still on 30 s after soft"
            time.sleep(0.5)
        assert set(_lxc_states(h).values()) == {"STOPPED"}
        assert _wait_watts(h, lambda w: w == power["standby_w"]) == power["standby_w"]
    finally:
        tb.ipmi(h, "chassis", "power", "on")
    states = _wait_states(h, "RUNNING")
    assert set(states.values()) == {"RUNNING"}, states
    _nodes_run_a_step(h)
