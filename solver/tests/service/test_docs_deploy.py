"""The configuration reference, the sample config and the systemd units stay true."""

from __future__ import annotations

import configparser
import importlib
import json
import sys
from pathlib import Path

from clavis.service.config import load_config
from clavis.service.configdoc import render

ROOT = Path(__file__).resolve().parents[3]


def test_config_reference_is_current() -> None:
    doc = (ROOT / "docs" / "clavisd.md").read_text()
    assert render(doc) == doc, "docs/clavisd.md is stale: python -m clavis.service.configdoc"


def test_sample_config_loads() -> None:
    cfg = load_config(ROOT / "deploy" / "config" / "clavis.toml.sample")
    assert cfg.users[0].role == "admin"
    # plain HTTP only on loopback; anything wider is served over TLS (issue 15 item 6)
    assert cfg.server.listen in {"127.0.0.1", "::1"} or cfg.server.tls_cert_file is not None


def test_systemd_units() -> None:
    units = {}
    for name in ("clavisd.service", "clavis-repack.service", "clavis-repack.timer"):
        p = configparser.ConfigParser(strict=False, interpolation=None)
        p.read(ROOT / "deploy" / "systemd" / name)
        units[name] = p
    assert units["clavisd.service"]["Service"]["ExecStart"].split()[0].endswith("/clavisd")
    repack = units["clavis-repack.service"]["Service"]
    assert repack["Type"] == "oneshot" and "repack --apply" in repack["ExecStart"]
    assert units["clavis-repack.timer"]["Timer"]["OnUnitActiveSec"] == "60s"


def test_ingest_benchmark_section_renders_its_results_only() -> None:
    """The generated docs/benchmarks.md section: figures and the machine, no stray text."""
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "bench" / "ingest")]
    try:
        ingest_bench = importlib.import_module("ingest_bench")
    finally:
        del sys.path[:2]
    # Keys added to the results later default to a value, so an older file renders too.
    r = {"client_lag_p99_ms": 0.0, "load_average_after": 0.0,
         **json.loads((ROOT / "bench" / "results" / "ingest.json").read_text())}  # fmt: skip
    text = ingest_bench.section(r)
    machine = next(line for line in text.splitlines() if line.startswith("Machine: "))
    assert machine.endswith("`.") and "type: ignore" not in text and "#" not in machine
    assert f"| {r['sent']} | {r['accepted']} | {r['stored_reports']} | {r['lost']} |" in text
