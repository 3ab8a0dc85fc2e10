"""/metrics over real HTTP on loopback: the Prometheus text format (HELP/TYPE, labels,
escaping), only /metrics served, and the agent's series with the values it measured."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from clavis_contracts import RegistrationRequest
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.metrics import Metric, serve
from clavis_monitor.perf import RecordedCounters
from clavis_monitor.sender import Sender, Spool

from .cgroups import CgroupSet
from .clavisd import KEY

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_exposition(text: str) -> tuple[Series, dict[str, str]]:
    """Samples by (name, labels) and the TYPE of each metric, from Prometheus text; any
    line that fits neither the sample nor the comment grammar fails the test."""
    samples: Series = {}
    types: dict[str, str] = {}
    helps: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
            continue
        m = _LINE.match(line)
        assert m is not None, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        pairs = _LABEL.findall(labels or "")
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == (labels or ""), line
        unescaped = frozenset(
            (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")) for k, v in pairs
        )
        assert name in types and name in helps, f"{name} has no TYPE/HELP before it"
        samples[(name, unescaped)] = float(value)
    return samples, types


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, "", ""


def value(samples: Series, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_the_endpoint_serves_the_text_format_on_loopback_and_only_metrics() -> None:
    calls = []

    def snapshot() -> list[Metric]:
        calls.append(1)
        return [
            Metric("t_gauge", "A gauge.", "gauge",
                   (({"container": 'a"b\\c\nd'}, 1.5), ({"container": "n2"}, 0.0))),
            Metric("t_total", "A counter.", "counter", (({}, 7.0),)),
            Metric("t_empty", "No samples now.", "gauge", ()),
        ]  # fmt: skip

    server = serve("127.0.0.1", 0, snapshot)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        status, ctype, body = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        samples, types = parse_exposition(body)
        assert types == {"t_gauge": "gauge", "t_total": "counter", "t_empty": "gauge"}
        assert value(samples, "t_gauge", container='a"b\\c\nd') == 1.5  # escaped and back
        assert value(samples, "t_gauge", container="n2") == 0.0
        assert value(samples, "t_total") == 7.0
        assert get(f"http://127.0.0.1:{port}/metrics?x=1")[0] == 200
        assert get(f"http://127.0.0.1:{port}/")[0] == 404
        assert get(f"http://127.0.0.1:{port}/metricsx")[0] == 404
        assert len(calls) == 2  # a 404 never renders the snapshot
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    cs = CgroupSet(["m1", "m2"]).create()
    try:
        yield cs
    finally:
        cs.remove()


def test_the_agents_series_carry_what_it_measured(cgroups: CgroupSet, tmp_path: Path) -> None:
    # m1 has recorded counters for two intervals (one mpki value); m2 has none
    recorded = RecordedCounters([
        json.dumps({"container": "m1", "instructions": 1_000_000, "llc_misses": 1_000}),
        json.dumps({"container": "m1", "instructions": 3_000_000, "llc_misses": 9_000}),
    ])  # fmt: skip
    cfg = parse({
        "host": "h1",
        "clavisd": {"url": "http://127.0.0.1:9", "backoff_min_s": 60.0, "backoff_max_s": 60.0},
        "spool": {"dir": str(tmp_path / "spool")},
        "containers": {"scan_prefixes": [cgroups.prefix], "lxc_paths": []},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
    })  # fmt: skip
    sender = Sender(cfg.clavisd, Spool(cfg.spool), KEY)  # nothing listens: reports spool
    agent = Agent(cfg, sender, counters=recorded, recorded=True)
    step = {"op": "register", "node": "m1", "job_id": 8, "step_id": 0, "pids": [os.getpid()],
            "uid": 1000, "job_name": "lbm.sh", "class_hint": "devil"}  # fmt: skip
    assert agent.registry.apply(RegistrationRequest.model_validate(step), time.time()) is None
    agent.sample_cpu()
    agent.sample_perf()
    time.sleep(0.2)
    agent.sample_cpu()
    agent.sample_perf()
    agent.sample_power()
    report = agent.report_once()  # the first POST fails: spooled
    agent.report_once()  # backoff runs: spooled at once
    server = serve("127.0.0.1", 0, agent.metrics)
    try:
        status, _, body = get(f"http://127.0.0.1:{server.server_address[1]}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200
    s, types = parse_exposition(body)
    # 8000 misses in 2e6 instructions between m1's two readings
    assert value(s, "clavis_monitor_container_intensity_mpki", container="m1",
                 source="recorded") == pytest.approx(4.0)  # fmt: skip
    m2_reason = "no recorded counters left for m2"
    assert value(s, "clavis_monitor_container_intensity_unsupported", container="m2",
                 reason=m2_reason) == 1.0  # fmt: skip
    assert not any(
        k[0] == "clavis_monitor_container_intensity_mpki" and ("container", "m2") in k[1] for k in s
    )  # unsupported: absent, never a made-up value
    by_name = {c.name: c for c in report.containers}
    assert (by_name["m1"].job, by_name["m1"].app, by_name["m1"].class_hint) == (
        "8",
        "1000:lbm.sh",
        "devil",
    )
    assert (by_name["m2"].app, by_name["m2"].class_hint) == (None, None)
    for name in ("m1", "m2"):
        assert value(s, "clavis_monitor_container_busy_cores", container=name) == (
            by_name[name].busy_cores
        )
    assert value(s, "clavis_monitor_host_busy_cores") == report.busy_cores
    assert not any(k[0] == "clavis_monitor_host_watts" for k in s)  # power unknown: absent
    assert "no RAPL package domains" in next(
        dict(k[1])["state"] for k in s if dict(k[1]).get("sampler") == "power:rapl"
    )
    for link in ("same-host", "same-rack", "cross-rack"):
        for direction in ("sent", "received"):
            assert value(s, "clavis_monitor_traffic_bytes_per_second", link=link,
                         direction=direction) == 0.0  # fmt: skip
    assert value(s, "clavis_monitor_reports_total") == 2.0
    assert value(s, "clavis_monitor_spool_reports") == 2.0
    assert value(s, "clavis_monitor_spool_bytes") == float(
        sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.json"))
    )
    assert value(s, "clavis_monitor_send_failures_total") == 1.0
    assert value(s, "clavis_monitor_reports_sent_total") == 0.0
    assert value(s, "clavis_monitor_reports_dropped_total", reason="spool-full") == 0.0
    assert value(s, "clavis_monitor_reports_dropped_total", reason="refused") == 0.0
    assert value(s, "clavis_monitor_containers_vanished_total") == 0.0
    assert value(s, "clavis_monitor_registrations_total", result="accepted") == 0.0
    assert value(s, "clavis_monitor_cpu_seconds_total") > 0.0
    assert value(s, "clavis_monitor_sampler_state", sampler="perf", state="recorded") == 1.0
    assert value(s, "clavis_monitor_sampler_state", sampler="traffic", state="disabled") == 1.0
    counters = {n for n, kind in types.items() if kind == "counter"}
    assert all(n.endswith("_total") for n in counters), counters
