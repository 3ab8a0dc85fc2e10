"""Host power (hostpower.py): the hysteresis as pure functions, the password file rules,
and clavisd powering a real ipmi_sim BMC on loopback off and on (the monitor tests' BMC
fixture, monitor/tests/monitor_tests/bmc.py), with reports through the real ingest path."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.advice_worker import AdviceWorker
from clavis.service.api import serve
from clavis.service.config import ConfigError, load_config
from clavis.service.daemon import Clavisd, main
from clavis.service.hostpower import (
    HostState,
    earliest_power_on,
    note_occupancy,
    seen,
    should_power_off,
)
from clavis.service.hostpower_bmc import BmcError, BmcPasswordError, parse_status

from .helpers import container, login, post_report, report, write_setup

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "monitor" / "tests"))
from monitor_tests.bmc import Bmc, free_udp_port

IDLE_W, STANDBY_W = 150, 10
needs_sim = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ipmi_sim") is None or shutil.which("ipmitool") is None,
    reason="needs root, ipmi_sim and ipmitool (make testbed-install)",
)


# --- hysteresis (pure) ---------------------------------------------------------------


def test_power_off_needs_the_grace_period_and_the_on_dwell() -> None:
    on_at, empty_at = 1000.0, 5000.0
    st = HostState("on", on_at, empty_at)
    # empty for 599 s of a 600 s grace: stays on; at 600 s: off
    assert not should_power_off(st, empty_at + 599, 600, 1800, stay_on=False)
    assert should_power_off(st, empty_at + 600, 600, 1800, stay_on=False)
    # on for less than min_on_s (came on 100 s ago), even though empty long enough: stays on
    fresh = HostState("on", empty_at + 500, empty_at)
    assert not should_power_off(fresh, empty_at + 600, 600, 1800, stay_on=False)
    assert should_power_off(fresh, empty_at + 500 + 1800, 600, 1800, stay_on=False)
    # kept on by config, holding a container, unknown or already off: never
    assert not should_power_off(st, 1e9, 600, 1800, stay_on=True)
    assert not should_power_off(HostState("on", on_at, None), 1e9, 0, 0, stay_on=False)
    for power in ("unknown", "off", "powering-off", "powering-on"):
        assert not should_power_off(HostState(power, on_at, empty_at), 1e9, 0, 0, False)


def test_power_on_waits_out_the_off_dwell() -> None:
    off = HostState("off", 1000.0, 900.0)
    assert earliest_power_on(off, 1010.0, 60) == 1060.0
    assert earliest_power_on(off, 2000.0, 60) == 2000.0
    assert earliest_power_on(HostState("on", 1000.0, None), 1010.0, 60) == 1010.0


def test_occupancy_and_status_keep_the_right_clocks() -> None:
    st = HostState("on", 100.0, None)
    empty = note_occupancy(st, 0, 200.0)
    assert empty.empty_since == 200.0
    assert note_occupancy(empty, 0, 300.0).empty_since == 200.0  # empty since the first
    assert note_occupancy(empty, 2, 300.0).empty_since is None
    # an unknown spell does not restart the dwell clock; a real switch does
    unknown = seen(st, "unknown", 500.0)
    assert (unknown.power, unknown.since) == ("unknown", 100.0)
    back = seen(unknown, "on", 600.0)
    assert (back.power, back.since) == ("on", 100.0)
    off = seen(back, "off", 700.0)
    assert (off.power, off.since) == ("off", 700.0)


def test_status_parser_on_captured_output() -> None:
    assert parse_status("Chassis Power is on\n") == "on"
    assert parse_status("Chassis Power is off\n") == "off"
    with pytest.raises(BmcError, match="unexpected"):
        parse_status("Error: Unable to establish IPMI v2 / RMCP+ session\n")


# --- clavisd with real BMCs ----------------------------------------------------------


def _setup(tmp: Path, bmcs: dict[str, str], password: Path, **keys: object) -> Path:
    opts = {"enabled": True, "grace_s": 0, "min_on_s": 0, "min_off_s": 1, "soft_timeout_s": 1,
            "on_timeout_s": 10, "interval_s": 3600, "command_timeout_s": 8, **keys}  # fmt: skip
    lines = [f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}" for k, v in opts.items()]
    lines.append(f'bmc_password_file = "{password}"')
    lines.append("[host_power.bmcs]")
    lines += [f'{h} = "{a}"' for h, a in bmcs.items()]
    extra = '[ingest]\nwriter = "thread"\n[repack]\ninterval_s = 0\n[host_power]\n'
    return write_setup(tmp, extra=extra + "\n".join(lines).replace("'", '"') + "\n")


class Emulation:
    """What the testbed does around a BMC (deploy/testbed/ctb/power.py, monitor): the
    watts follow the chassis power file (standby when off) and the host's monitor
    posts a signed report through clavisd's real ingest path while it is on."""

    def __init__(self, bmcs: dict[str, Bmc], client: TestClient) -> None:
        self.bmcs, self.client = bmcs, client
        self.containers: dict[str, list[dict[str, object]]] = {h: [] for h in bmcs}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + 120  # bounded, whatever the test does
        while not self.stop.is_set() and time.monotonic() < deadline:
            for host, b in self.bmcs.items():
                powered = (b.dir / "power").read_text().strip() == "1"
                b.set_watts(IDLE_W if powered else STANDBY_W)
                if powered:
                    post_report(self.client, report(host, self.containers[host]))
            self.stop.wait(0.3)

    def __enter__(self) -> Emulation:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _watts(b: Bmc) -> float:
    out = b.ipmitool("dcmi", "power", "reading").stdout
    m = re.search(r"Instantaneous power reading:\s*([0-9.]+)", out)
    assert m, out
    return float(m.group(1))


def _until(what: str, check: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def two_bmcs(tmp_path: Path) -> Iterator[dict[str, Bmc]]:
    bmcs = {h: Bmc(tmp_path / f"bmc-{h}") for h in ("h1", "h2")}
    try:
        for b in bmcs.values():
            b.dir.mkdir()
            b.start(watts=IDLE_W)
        yield bmcs
    finally:
        for b in bmcs.values():
            b.stop()


def _status(b: Bmc) -> str:
    return b.ipmitool("chassis", "power", "status").stdout.strip()


@needs_sim
def test_empty_host_goes_to_standby_and_comes_back_on_request(
    two_bmcs: dict[str, Bmc], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    h1, h2 = two_bmcs["h1"], two_bmcs["h2"]
    password = h1.password_file.read_text().strip()
    h2.password_file.write_text(password + "\n")  # one password for all BMCs, as configured
    _restart_with_password(h2)
    cfg = _setup(tmp_path, {"h1": f"127.0.0.1:{h1.port}", "h2": f"127.0.0.1:{h2.port}"},
                 h1.password_file, stay_on=["h2"])  # fmt: skip
    d = Clavisd(load_config(cfg))
    assert d.host_power is not None
    hp = d.host_power
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client, Emulation(two_bmcs, client) as emu:
            emu.containers["h1"] = [container("c1")]
            _until("h1's container stored", lambda: hp.occupancy().get("h1") == 1)
            hp.tick(time.time())
            assert hp.state("h1").power == "on"  # holds a container: stays on
            assert hp.events() == []

            emu.containers["h1"] = []
            _until("h1 empty", lambda: hp.occupancy().get("h1", 0) == 0)
            # held (Slurm resumes nodes onto it that its monitor does not list yet): kept on
            hp.hold("h1", time.time() + 30)
            hp.tick(time.time())
            assert hp.state("h1").power == "on" and hp.events() == []
            hp.tick(time.time() + 31)  # the hold is over: empty past grace, powered off
            _until("h1 powered off", lambda: hp.state("h1").power == "off")
            assert "off" in _status(h1)
            assert "shutdown" in (h1.dir / "chassis.log").read_text()  # soft was tried first
            _until("standby watts", lambda: _watts(h1) == STANDBY_W)
            assert hp.state("h2").power == "on" and "on" in _status(h2)  # stay_on
            # reported moments ago, but off: repacking must not move anything onto it
            states = {h.name: h.state for h in d.snapshot(time.time()).cluster.hosts}
            assert (states["h1"], states["h2"]) == ("drain", "up")
            assert [(e["host"], e["action"], e["result"]) for e in hp.events()] == [
                ("h1", "soft", "sent"), ("h1", "off", "sent"), ("h1", "off", "ok")]  # fmt: skip
            metrics = client.get("/metrics").text
            assert 'clavis_host_power_actions_total{action="off",result="ok"} 1' in metrics
            assert 'clavis_host_power_state{host="h1",state="off"} 1' in metrics
            assert 'clavis_host_power_state{host="h2",state="on"} 1' in metrics

            r = client.post("/api/v1/hosts/h1/power-on", headers=login(client, "ada"))
            assert r.status_code == 200, r.text
            assert r.json()["reported"] is True and r.json()["state"] == "on"
            assert "on" in _status(h1)
            _until("idle watts again", lambda: _watts(h1) == IDLE_W)
            assert hp.events("h1")[-2:][0]["action"] == "on"
            assert hp.events("h1")[-1]["result"] == "ok"
            assert d.last_report["h1"] >= hp.events("h1")[-2]["ts"]
            assert {h.name: h.state for h in d.snapshot(time.time()).cluster.hosts}["h1"] == "up"
            metrics = client.get("/metrics").text
            assert 'clavis_host_power_actions_total{action="on",result="ok"} 1' in metrics
            assert client.post("/api/v1/hosts/h9/power-on",
                               headers=login(client, "ada")).status_code == 404  # fmt: skip
            assert client.post("/api/v1/hosts/h1/power-on",
                               headers=login(client, "vic")).status_code == 403  # fmt: skip
    finally:
        d.stop()
    everything = caplog.text + repr(hp.events())
    assert password not in everything


def _restart_with_password(b: Bmc) -> None:
    """ipmi_sim's user table comes from lan.conf: give this BMC the shared password."""
    b.stop()
    conf = b.dir / "lan.conf"
    pw = b.password_file.read_text().strip()
    conf.write_text(re.sub(r'"admin" "[0-9a-f]+"', f'"admin" "{pw}"', conf.read_text()))
    with (b.dir / "ipmi_sim.log").open("ab") as log:
        b.proc = subprocess.Popen(
            ["ipmi_sim", "-c", str(conf), "-f", str(b.dir / "sim.emu"), "-s",
             str(b.dir / "state"), "-n"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    b._wait_ready()


@needs_sim
def test_min_on_dwell_protects_hosts_after_a_restart(
    two_bmcs: dict[str, Bmc], tmp_path: Path
) -> None:
    h1 = two_bmcs["h1"]
    cfg = _setup(tmp_path, {"h1": f"127.0.0.1:{h1.port}"}, h1.password_file, min_on_s=3600)
    d = Clavisd(load_config(cfg))
    assert d.host_power is not None
    d.ingestor.start()  # stop() ends it
    try:
        d.host_power.tick(time.time())
        st = d.host_power.state("h1")
        assert st.power == "on" and st.empty_since is not None  # empty, but on < min_on_s
        assert d.host_power.events() == [] and "on" in _status(h1)
    finally:
        d.stop()


@needs_sim
def test_bmc_that_does_not_answer_is_unknown_never_off(tmp_path: Path) -> None:
    b = Bmc(tmp_path / "bmc")
    b.dir.mkdir()
    b.password_file.write_text("not-a-real-password\n")
    b.password_file.chmod(0o600)
    cfg = _setup(tmp_path, {"h1": f"127.0.0.1:{free_udp_port()}"}, b.password_file)
    d = Clavisd(load_config(cfg))
    assert d.host_power is not None
    hp = d.host_power
    d.ingestor.start()  # stop() ends it
    try:
        hp.tick(time.time())
        assert hp.state("h1").power == "unknown"
        hp.tick(time.time())  # still unknown: audited once, never powered off
        assert [(e["action"], e["result"]) for e in hp.events()] == [("status", "unknown")]
        out = hp.power_on("h1")
        assert (out.state, out.reported) == ("unknown", False)
        assert 'clavis_host_power_state{host="h1",state="unknown"} 1' in hp.metrics_text()
        assert 'state="off"} 1' not in hp.metrics_text()
    finally:
        d.stop()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_password_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    pw = tmp_path / "bmc-password"
    pw.write_text("secret-password\n")
    pw.chmod(mode)
    cfg = _setup(tmp_path, {"h1": "127.0.0.1:623"}, pw)
    with pytest.raises(BmcPasswordError, match=r"owner only \(chmod 600\)"):
        Clavisd(load_config(cfg))


def test_clavisd_refuses_a_world_readable_password_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = tmp_path / "bmc-password"
    pw.write_text("secret-password\n")
    pw.chmod(0o644)
    cfg = _setup(tmp_path, {"h1": "127.0.0.1:623"}, pw)
    assert main(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bmc-password" in err and "secret-password" not in err


def test_config_refuses_bmcs_of_unknown_hosts_and_bad_addresses(tmp_path: Path) -> None:
    pw = tmp_path / "bmc-password"
    pw.write_text("secret-password\n")
    pw.chmod(0o600)
    with pytest.raises(ConfigError, match="not address:port"):
        load_config(_setup(tmp_path, {"h1": "127.0.0.1"}, pw))
    with pytest.raises(ConfigError, match="not in the cluster"):
        Clavisd(load_config(_setup(tmp_path, {"nohost": "127.0.0.1:623"}, pw)))


@needs_sim
def test_bmc_back_after_an_outage_is_audited_once_each_way(
    two_bmcs: dict[str, Bmc], tmp_path: Path
) -> None:
    h1 = two_bmcs["h1"]
    cfg = _setup(tmp_path, {"h1": f"127.0.0.1:{h1.port}"}, h1.password_file, min_on_s=3600)
    d = Clavisd(load_config(cfg))
    assert d.host_power is not None
    hp = d.host_power
    d.ingestor.start()  # stop() ends it
    try:
        hp.tick(time.time())
        assert hp.state("h1").power == "on" and hp.events() == []
        h1.stop()
        hp.tick(time.time())
        assert hp.state("h1").power == "unknown" and "h1" in hp.not_on()
        _restart_with_password(h1)
        hp.tick(time.time())
        assert hp.state("h1").power == "on" and hp.not_on() == frozenset()
        assert [(e["action"], e["result"]) for e in hp.events()] == [
            ("status", "unknown"), ("status", "on")]  # fmt: skip
    finally:
        d.stop()


def _advice_of(d: Clavisd) -> dict[str, str]:
    """Node -> contention of the advice file clavisd publishes now."""
    d.publish_advice()
    doc = json.loads(d.config.advice.path.read_text())
    return {n["node"]: n["contention"] for n in doc["nodes"]}


@needs_sim
@pytest.mark.parametrize("builder", ["clavisd", "advice process"])
def test_the_advice_marks_a_host_that_is_off_unavailable_at_once(
    two_bmcs: dict[str, Bmc], tmp_path: Path, builder: str
) -> None:
    h1 = two_bmcs["h1"]
    cfg = _setup(tmp_path, {"h1": f"127.0.0.1:{h1.port}"}, h1.password_file, min_on_s=3600)
    d = Clavisd(load_config(cfg))
    assert d.host_power is not None and d.config.ingest.max_report_age_s >= 30
    hp = d.host_power
    d.ingestor.start()
    if builder == "advice process":  # as with ingest.writer = "process"
        c = d.config
        d._advice_worker = AdviceWorker(c.store.url, c.cluster_file, c.ingest.max_report_age_s,
                                        c.classify, c.advice.valid_s)  # fmt: skip
        d._advice_worker.start()
    try:
        with TestClient(serve(d)) as client, Emulation({"h1": h1}, client) as emu:
            emu.containers["h1"] = [container("c1", mpki=0.5)]
            _until("c1 stored", lambda: hp.occupancy().get("h1") == 1)
            hp.tick(time.time())
            assert hp.state("h1").power == "on" and hp.powered_down() == frozenset()
            assert _advice_of(d)["c1"] == "devil-free"
            # the host goes off under its node (a power cut, or someone at its BMC): the
            # next pass sees it, and the advice says so at once, though h1 reported
            # moments ago (its reports are fresh for max_report_age_s)
            assert h1.ipmitool("chassis", "power", "off").returncode == 0
            hp.tick(time.time())
            assert hp.state("h1").power == "off" and hp.powered_down() == {"h1"}
            assert time.time() - d.last_report["h1"] < 5
            assert _advice_of(d)["c1"] == "unknown"
            # switching back on (power_on's state until the monitor reports): still
            # unavailable until it is on
            hp._set("h1", HostState("powering-on", time.time(), None))
            assert hp.powered_down() == {"h1"} and _advice_of(d)["c1"] == "unknown"
            assert h1.ipmitool("chassis", "power", "on").returncode == 0
            hp.tick(time.time())
            assert hp.powered_down() == frozenset() and _advice_of(d)["c1"] == "devil-free"
    finally:
        d.stop()
