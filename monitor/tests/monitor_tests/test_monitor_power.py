"""Power against a real ipmi_sim BMC on loopback: DCMI, the SDR Watts sensor, the
reading following the simulated watts, and a BMC that goes down."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.power import PowerReader, parse_dcmi, parse_sdr_watts

from .bmc import Bmc

needs_sim = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ipmi_sim") is None or shutil.which("ipmitool") is None,
    reason="needs root, ipmi_sim and ipmitool (make testbed-install)",
)


def test_parsers_on_captured_output() -> None:
    dcmi = (
        "\n    Instantaneous power reading:                   212 Watts\n"
        "    Minimum during sampling period:                  0 Watts\n"
    )
    assert parse_dcmi(dcmi) == 212.0
    sdr = "Host Power       | 150 Watts         | ok\nFan 1        | 3000 RPM  | ok\n"
    assert parse_sdr_watts(sdr, "") == 150.0
    assert parse_sdr_watts(sdr, "Host Power") == 150.0
    with pytest.raises(Exception, match="sensor 'PSU'"):
        parse_sdr_watts(sdr, "PSU")


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Bmc]:
    b = Bmc(tmp_path / "bmc")
    b.start(watts=150)
    try:
        yield b
    finally:
        b.stop()


def _cfg(bmc: Bmc, tmp_path: Path, methods: list[str]) -> dict[str, object]:
    return {
        "host": "h1",
        "traffic": {"backend": "none"},
        "containers": {"scan_prefixes": ["cmt-none."], "lxc_paths": []},
        "power": {"methods": methods, "bmc_host": "127.0.0.1", "bmc_port": bmc.port,
                  "bmc_password_file": str(bmc.password_file), "timeout_s": 4.0,
                  "rapl_root": str(tmp_path / "no-rapl")},
    }  # fmt: skip


@needs_sim
def test_dcmi_reading_follows_the_simulated_watts(bmc: Bmc, tmp_path: Path) -> None:
    agent = Agent(parse(_cfg(bmc, tmp_path, ["ipmi-dcmi", "ipmi-sensor", "rapl"])), None)
    try:
        agent.sample_cpu()
        agent.sample_power()
        report = agent.build_report()
        assert (report.power.source, report.power.watts) == ("ipmi-dcmi", 150.0)
        bmc.set_watts(236)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            agent.sample_power()
            if agent.build_report().power.watts == 236.0:
                break
            time.sleep(0.5)
        assert agent.build_report().power.watts == 236.0
        assert agent.power.states["ipmi-dcmi"] == "ok"
    finally:
        agent.power.close()  # ends the ipmitool shell (it outlived the test before)


@needs_sim
def test_sdr_watts_sensor_when_dcmi_is_not_asked(bmc: Bmc, tmp_path: Path) -> None:
    reader = PowerReader(parse(_cfg(bmc, tmp_path, ["ipmi-sensor"])).power)
    try:
        bmc.set_watts(180)
        deadline = time.monotonic() + 10
        reading = reader.read()
        while reading.watts != 180.0 and time.monotonic() < deadline:
            time.sleep(0.5)
            reading = reader.read()
        assert (reading.source, reading.watts) == ("ipmi-sensor", 180.0)  # M=2: even watts
    finally:
        reader.close()


@needs_sim
def test_bmc_down_is_a_clear_state_and_the_agent_keeps_reporting(bmc: Bmc, tmp_path: Path) -> None:
    agent = Agent(parse(_cfg(bmc, tmp_path, ["ipmi-dcmi", "ipmi-sensor", "rapl"])), None)
    agent.sample_cpu()
    bmc.stop()
    t0 = time.monotonic()
    agent.sample_power()
    assert time.monotonic() - t0 < 2 * 4.0 + 2  # bounded by the timeouts
    report = agent.build_report()
    assert (report.power.source, report.power.watts) == ("none", None)
    states = agent.power.states
    assert states["ipmi-dcmi"] != "ok" and "ipmitool dcmi power reading" in states["ipmi-dcmi"]
    assert "no RAPL package domains" in states["rapl"]
    text = "".join(
        f"{labels}\n" for m in agent.metrics() if m.name.endswith("sampler_state")
        for labels, _ in m.samples
    )  # fmt: skip
    assert "power:ipmi-dcmi" in text


@needs_sim
def test_one_ipmitool_session_serves_many_readings_and_survives_a_bmc_restart(
    bmc: Bmc, tmp_path: Path
) -> None:
    reader = PowerReader(parse(_cfg(bmc, tmp_path, ["ipmi-dcmi"])).power)
    try:
        for _ in range(3):
            assert reader.read().watts == 150.0
        assert reader._shell.starts == 1  # one session for every reading
        shell_pid = reader._shell._proc.pid if reader._shell._proc else None
        bmc.stop()  # the session ends with the BMC; a new BMC knows nothing of it
        bmc.start(watts=170)
        reading = reader.read()  # the old session fails, one retry in a fresh shell
        assert (reading.source, reading.watts) == ("ipmi-dcmi", 170.0), reader.states
        assert reader._shell.starts == 2
    finally:
        reader.close()
    assert shell_pid is not None and not Path(f"/proc/{shell_pid}").exists()
    assert reader._shell._proc is None


@needs_sim
def test_ipmitool_command_is_an_argument_list_a_site_can_prefix(bmc: Bmc, tmp_path: Path) -> None:
    # e.g. ["nsenter", "--net=/run/netns/mgmt", "ipmitool"] on a site whose BMC network is
    # reached from another netns; `timeout` stands for any prefix here
    doc = _cfg(bmc, tmp_path, ["ipmi-dcmi"])
    power = doc["power"]
    assert isinstance(power, dict)
    power["ipmitool"] = ["timeout", "60", "ipmitool"]
    agent = Agent(parse(doc), None)
    try:
        agent.sample_power()
        assert agent.build_report().power.watts == 150.0, agent.power.states
    finally:
        agent.power.close()
