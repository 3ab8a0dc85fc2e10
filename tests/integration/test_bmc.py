"""BMCs: ipmi_sim per host, DCMI power reading from our loadlib module, Watts sensor,
chassis control; the watts follow the load of that host's containers."""

from __future__ import annotations

import re
import subprocess
import time
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


def test_watts_rise_with_that_hosts_load_only(testbed: dict[str, Any]) -> None:
    power = testbed["topology"]["power"]
    loaded, quiet = _host(testbed, "r2h2"), _host(testbed, "r1h1")
    base = tb.dcmi_watts(loaded)
    burners = [
        subprocess.Popen(
            [
                "nsenter",
                "--net=/run/netns/ctb-r2h2",
                "--",
                "lxc-attach",
                "-n",
                c["name"],
                "-P",
                str(tb.RUN_DIR / "lxc"),
                "--",
                "timeout",
                "12",
                "sh",
                "-c",
                "while :; do :; done",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for c in loaded["containers"]
    ]
    try:
        # two busy containers on a 2-core machine: well over one core's worth
        high = _wait_watts(loaded, lambda w: w >= base + power["per_core_w"])
        calm = tb.dcmi_watts(quiet)
    finally:
        for p in burners:
            p.wait(timeout=30)
    assert high >= base + power["per_core_w"], (base, high)
    assert calm <= power["idle_w"] + 0.5 * power["per_core_w"], calm
    after = _wait_watts(loaded, lambda w: w <= base + 0.25 * power["per_core_w"])
    assert after <= base + 0.25 * power["per_core_w"], (base, after)


def test_chassis_power_off_reads_standby(testbed: dict[str, Any]) -> None:
    power = testbed["topology"]["power"]
    h = _host(testbed, "r1h2")
    try:
        tb.ipmi(h, "chassis", "power", "off")
        assert "off" in tb.ipmi(h, "chassis", "power", "status")
        w = _wait_watts(h, lambda w: w == power["standby_w"])
        assert w == power["standby_w"]
    finally:
        tb.ipmi(h, "chassis", "power", "on")
    assert "on" in tb.ipmi(h, "chassis", "power", "status")
    assert _wait_watts(h, lambda w: w >= power["idle_w"]) >= power["idle_w"]
