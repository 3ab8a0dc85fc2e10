"""The configuration reference, the sample config and the systemd units stay true."""

from __future__ import annotations

import configparser
from pathlib import Path

from clavis.service.config import load_config
from clavis.service.configdoc import render

ROOT = Path(__file__).resolve().parents[3]


def test_config_reference_is_current() -> None:
    doc = (ROOT / "docs" / "clavisd.md").read_text()
    assert render(doc) == doc, "docs/clavisd.md is stale: python -m clavis.service.configdoc"


def test_sample_config_loads() -> None:
    cfg = load_config(ROOT / "deploy" / "config" / "clavis.toml.sample")
    assert cfg.server.listen == "0.0.0.0" and cfg.users[0].role == "admin"


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
