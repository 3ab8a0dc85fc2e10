"""Delivery to a real clavisd: signed reports stored; clavisd down for several times its
freshness window (ingest.max_report_age_s) loses nothing up to the spool limit, with a
backoff that grows past that window too (issue 15, item 2); beyond the spool limit the
oldest are dropped and counted."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clavis.service.config import IngestConfig  # the head node's defaults, for one check
from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.sender import Sender, Spool

from .cgroups import CgroupSet
from .clavisd import KEY, Clavisd

# Times scaled down by config: clavisd's freshness window is WINDOW_S (120 s by default)
# and the outage several times that; the monitor's backoff may grow past the window.
WINDOW_S = 5.0
OUTAGE_S = float(os.environ.get("CLAVIS_MONITOR_OUTAGE_S", str(4 * WINDOW_S)))
BACKOFF_MAX_S = 2 * WINDOW_S


def wait_for(cond: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {limit_s} s waiting for {what}")


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    cs = CgroupSet(["n1", "n2"]).create()
    try:
        yield cs
    finally:
        cs.remove()


def _agent(tmp: Path, url: str, cs: CgroupSet, **spool: int) -> Agent:
    cfg = parse({
        "host": "h1", "interval_s": 0.25,
        "clavisd": {"url": url, "timeout_s": 2.0, "backoff_min_s": 0.2,
                    "backoff_max_s": BACKOFF_MAX_S},
        "spool": {"dir": str(tmp / "spool"), **spool},
        "containers": {"scan_prefixes": [cs.prefix], "lxc_paths": []},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp / "no-rapl"), "every_s": 1.0},
    })  # fmt: skip
    sender = Sender(cfg.clavisd, Spool(cfg.spool), KEY)
    return Agent(cfg, sender)


@pytest.mark.slow
def test_an_outage_longer_than_the_window_loses_nothing(tmp_path: Path, cgroups: CgroupSet) -> None:
    d = Clavisd(tmp_path, max_report_age_s=WINDOW_S)
    d.start()
    agent = _agent(tmp_path, d.url, cgroups)
    assert agent.sender is not None
    sender = agent.sender
    try:
        agent.start()
        wait_for(lambda: sender.stats.sent >= 4, 30, "reports stored")
        d.stop()
        down = time.monotonic()
        wait_for(lambda: len(sender.spool) >= 4, 30, "reports spooled while clavisd is down")
        while time.monotonic() - down < OUTAGE_S:  # the agent keeps sampling meanwhile
            time.sleep(1)
        assert sender.stats.failures >= 1 and "unreachable" in sender.stats.last_error
        spooled = len(sender.spool)
        assert spooled >= OUTAGE_S / 0.25 * 0.5, spooled
        d.start()
        back = time.time()
        wait_for(lambda: len(sender.spool) == 0, 120, "the spool to drain")
    finally:
        agent.stop()
        d.stop()
    assert sender.spool.dropped == 0 and sender.stats.rejected == 0, sender.stats.last_error
    times = d.sample_times("h1")
    # Reports far older than the window when clavisd came back were stored (one every
    # 0.25 s is built; at least one a second counted, for a machine under load), and below
    # every report built is stored: no hole.
    assert sum(1 for ts in times if ts < back - 2 * WINDOW_S) >= OUTAGE_S - 2 * WINDOW_S
    assert times == sorted(set(times))
    # every report built was stored once, the spooled ones in order (409 would refuse)
    assert sender.stats.sent == agent.reports
    assert d.stored_reports("h1") == agent.reports
    reports = {c.name for c in agent.last_report.containers}
    assert {"n1", "n2"} <= reports


def test_beyond_the_spool_limit_the_oldest_are_dropped_and_counted(
    tmp_path: Path, cgroups: CgroupSet
) -> None:
    agent = _agent(tmp_path, "http://127.0.0.1:9", cgroups, max_reports=5)  # nothing listens
    assert agent.sender is not None
    agent.sample_cpu()
    for _ in range(12):
        agent.report_once()
    spool = agent.sender.spool
    assert len(spool) == 5 and spool.dropped == 7
    names = sorted(p.name for p in (tmp_path / "spool").glob("*.json"))
    assert names == [f"{i:016d}.json" for i in range(8, 13)]  # the newest five
    doc = json.loads((tmp_path / "spool" / names[0]).read_text())
    assert doc["kind"] == "clavis.report" and doc["host"] == "h1"
    # a restarted agent finds the spool as it was
    again = Spool(agent.cfg.spool)
    assert len(again) == 5
    text = "".join(f"{m.name}{dict(lab)} {v}\n" for m in agent.metrics() for lab, v in m.samples)
    assert "clavis_monitor_reports_dropped_total{'reason': 'spool-full'} 7.0" in text


def test_the_default_spool_fits_in_clavisds_default_backlog() -> None:
    """Defaults agree (issue 15, item 2): everything a default monitor's spool holds is
    still young enough for a default clavisd to store (docs/monitor.md, Outages)."""
    monitor = parse({"host": "h1"})
    reach_s = monitor.spool.max_reports * monitor.interval_s
    head = IngestConfig()
    assert head.max_report_age_s < reach_s <= head.max_backlog_s
