"""Memory intensity: the real reader says unsupported with the reason where no PMU is
exposed, and the arithmetic runs through recorded counters."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clavis_monitor.agent import Agent
from clavis_monitor.config import parse
from clavis_monitor.perf import (
    Counts,
    Cpu,
    PerfCounters,
    RecordedCounters,
    UnsupportedError,
    cpu_of,
    cpu_vendor,
    event_table,
    mpki,
    perf_cgroup_root,
)

from .cgroups import CgroupSet


def test_mpki_arithmetic() -> None:
    a, b = Counts(1_000_000, 5_000, 1_000), Counts(3_000_000, 25_000, 3_000)
    assert mpki(a, b) == pytest.approx(1000 * (20_000 + 2_000) / 2_000_000)
    assert mpki(a, a) == 0.0
    with pytest.raises(ValueError, match="backwards"):
        mpki(b, a)


SKYLAKE_SP = """processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 85
model name	: Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz

processor	: 1
vendor_id	: GenuineIntel
cpu family	: 6
model		: 85
"""
ZEN2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\n"
UNKNOWN_INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"


def test_event_table_per_model() -> None:
    assert cpu_of(SKYLAKE_SP) == Cpu("GenuineIntel", 6, 85)
    assert cpu_of(ZEN2) == Cpu("AuthenticAMD", 0x17, 49)
    skx = event_table(cpu_of(SKYLAKE_SP), {})
    assert (skx["prefetches"].type, skx["prefetches"].config) == (4, 0x3824)
    assert event_table(cpu_of(ZEN2), {})["prefetches"].config == 0xFF72
    # A model whose prefetch event we have not checked counts LLC misses only...
    assert "prefetches" not in event_table(cpu_of(UNKNOWN_INTEL), {})
    # ...until the site names the raw code, which also beats the table's.
    assert (
        event_table(cpu_of(UNKNOWN_INTEL), {"prefetches": "0x3824"})["prefetches"].config == 0x3824
    )
    assert event_table(cpu_of(ZEN2), {"prefetches": "0x1"})["prefetches"].config == 1
    assert cpu_of("garbage") == Cpu("unknown", None, None)


def test_event_table_and_raw_overrides() -> None:
    assert cpu_vendor("processor: 0\nvendor_id\t: AuthenticAMD\n") == "AuthenticAMD"
    table = event_table("GenuineIntel", {"llc_misses": "0x412e", "prefetches": "0xf824"})
    assert (table["llc_misses"].type, table["llc_misses"].config) == (4, 0x412E)
    assert table["prefetches"].config == 0xF824
    assert table["instructions"].type == 0


def test_real_reader_reports_why_it_cannot_count() -> None:
    reader = PerfCounters(event_table("GenuineIntel", {}), perf_cgroup_root(Path("/sys/fs/cgroup")))
    try:
        reader.probe()
    except UnsupportedError as exc:  # this machine: no PMU in the VM
        assert "perf_event_open" in str(exc) or "hierarchy" in str(exc)
    else:  # a host with counters: a real reading of the root cgroup must advance
        root = perf_cgroup_root(Path("/sys/fs/cgroup"))
        first = reader.read("root", root)
        sum(range(100_000))
        assert reader.read("root", root).instructions > first.instructions


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups)")
def test_recorded_counters_flow_into_the_report() -> None:
    cs = CgroupSet(["n1", "n2"]).create()
    try:
        lines = [
            '{"container": "n1", "instructions": 1000000, "llc_misses": 1000}',
            '{"container": "n1", "instructions": 3000000, "llc_misses": 41000, "prefetches": 2000}',
            '{"container": "n2", "instructions": 5000000, "llc_misses": 10}',
            '{"container": "n2", "instructions": 9000000, "llc_misses": 410}',
        ]
        cfg = parse(
            {
                "host": "h1",
                "containers": {"scan_prefixes": [cs.prefix], "lxc_paths": []},
                "traffic": {"backend": "none"},
            }
        )
        agent = Agent(cfg, None, counters=RecordedCounters(lines), recorded=True)
        agent.sample_cpu()
        agent.sample_perf()
        agent.sample_perf()
        agent.sample_cpu()
        report = agent.build_report()
        got = {c.name: (c.intensity_mpki, c.intensity_source) for c in report.containers}
        assert got["n1"] == (pytest.approx(21.0), "recorded")
        assert got["n2"] == (pytest.approx(0.1), "recorded")
        agent.sample_perf()  # the recording ended: unsupported, never a made-up value
        report = agent.build_report()
        assert {c.intensity_source for c in report.containers} == {"unsupported"}
        assert all(c.intensity_mpki is None for c in report.containers)
    finally:
        cs.remove()
