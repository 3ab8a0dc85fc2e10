"""The emulated miss counter source: off unless configured, read from the testbed's files
(clavis_monitor.emulated), and named ``emulated`` in the report and /metrics."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clavis_monitor.agent import Agent
from clavis_monitor.config import ConfigError, parse
from clavis_monitor.emulated import FORMAT, STALE_S
from clavis_monitor.emulated import parse as parse_file
from clavis_monitor.perf import Counts, UnsupportedError

from .cgroups import CgroupSet


def doc(name: str, instructions: int, misses: int, updated: float | None = None) -> str:
    return json.dumps({"format": FORMAT, "container": name, "instructions": instructions,
                       "llc_misses": misses, "prefetches": 0, "cpu_s": 1.0,
                       "updated": time.time() if updated is None else updated})  # fmt: skip


def test_parse_a_file_and_refuse_bad_ones() -> None:
    now = time.time()
    assert parse_file("n1", doc("n1", 10, 2, now), now) == Counts(10, 2, 0)
    for text, words in [
        ("{", "Expecting"),
        (json.dumps({"format": "other"}), "not a clavis-testbed.misses/1"),
        (doc("n2", 1, 1, now), "written for container 'n2'"),
        (doc("n1", -1, 1, now), "integers >= 0"),
        (doc("n1", 1, 1, now - STALE_S - 5), "not updated for 15 s"),
    ]:
        with pytest.raises(UnsupportedError, match=words):
            parse_file("n1", text, now)


def test_the_directory_must_be_absolute() -> None:
    assert parse({}).emulation.miss_counters_dir == ""  # off by default
    with pytest.raises(ConfigError, match=r"emulation\.miss_counters_dir: not an absolute"):
        parse({"emulation": {"miss_counters_dir": "run/misses"}})


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    if os.geteuid() != 0:
        pytest.skip("needs root (cgroups)")
    cs = CgroupSet(["e1", "e2"]).create()
    try:
        yield cs
    finally:
        cs.remove()


def _agent(cs: CgroupSet, tmp_path: Path, **extra: Any) -> Agent:
    cfg = parse({
        "host": "h1",
        "containers": {"scan_prefixes": [cs.prefix], "lxc_paths": []},
        "traffic": {"backend": "none"},
        "power": {"methods": ["rapl"], "rapl_root": str(tmp_path / "no-rapl")},
        **extra,
    })  # fmt: skip
    return Agent(cfg, None)


def _two_intervals(agent: Agent, write: Any) -> None:
    agent.sample_cpu()
    write(0)
    agent.sample_perf()
    time.sleep(0.1)
    agent.sample_cpu()
    write(1)
    agent.sample_perf()


def test_configured_emulation_is_reported_as_emulated(cgroups: CgroupSet, tmp_path: Path) -> None:
    d = tmp_path / "misses"
    d.mkdir()
    agent = _agent(cgroups, tmp_path, emulation={"miss_counters_dir": str(d)})
    if agent.source == "perf":
        pytest.skip("this host has hardware counters: emulation is rightly ignored")

    def write(step: int) -> None:  # e1: 25 misses per 1000 instructions; e2: no file
        (d / "e1.json").write_text(doc("e1", 2_000_000 * step, 50_000 * step))

    _two_intervals(agent, write)
    report = {c.name: c for c in agent.report_once().containers}
    assert (report["e1"].intensity_mpki, report["e1"].intensity_source) == (25.0, "emulated")
    assert report["e2"].intensity_source == "unsupported"  # no made-up value
    assert agent.unsupported["e2"].startswith("no emulated counters for e2")
    assert agent.last_report.schema_version == 3
    series = {m.name: m for m in agent.metrics()}
    labels = [dict(lb) for lb, _ in series["clavis_monitor_container_intensity_mpki"].samples]
    assert labels == [{"container": "e1", "source": "emulated"}]
    (state,) = [dict(lb) for lb, _ in series["clavis_monitor_sampler_state"].samples
                if dict(lb)["sampler"] == "perf"]  # fmt: skip
    assert state["state"] == f"emulated: {d}"


def test_without_configuration_the_files_are_not_read(cgroups: CgroupSet, tmp_path: Path) -> None:
    d = tmp_path / "misses"
    d.mkdir()
    agent = _agent(cgroups, tmp_path)
    assert agent.source == "perf"  # off by default: the files beside are never looked at

    def write(step: int) -> None:
        for name in ("e1", "e2"):
            (d / f"{name}.json").write_text(doc(name, 2_000_000 * step, 50_000 * step))

    _two_intervals(agent, write)
    sources = {c.intensity_source for c in agent.report_once().containers}
    assert "emulated" not in sources  # perf where the host has a PMU, else unsupported
