"""vismon-ui end to end: Debian's chromium, driven by playwright-core
(vismon-ui/e2e/run.mjs), against a real clavisd process serving the built UI, with a
store seeded by signed monitor reports. Needs `make ui` (npm ci, chromium, the build),
which `make test` runs first. Screenshots: vismon-ui/e2e-artifacts/ (docs/ui.md)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from .helpers import ROOT, container, report, signed, write_setup
from .process import Daemon, free_port

UI = ROOT / "vismon-ui"


def _reports(now: float) -> list[dict[str, Any]]:
    """Four hosts in two racks: two streaming jobs (devils) that talk, packed on h1 and
    h2, and two compute jobs (turtles) on h3 and h4; ten rounds so classes settle."""
    flow = {"a1": "a2", "b1": "b2"}
    hosts = {
        "h1": [("a1", "a", 20.0), ("b1", "b", 20.0)],
        "h2": [("a2", "a", 20.0), ("b2", "b", 20.0)],
        "h3": [("c1", "c", 0.5), ("d1", "d", 0.5)],
        "h4": [("c2", "c", 0.5), ("d2", "d", 0.5)],
    }
    out = []
    for i in range(10):
        for host, cs in hosts.items():
            docs = [
                container(n, job=j, mpki=m,
                          traffic=[{"peer": flow[n], "bytes_per_s": 5e7}] if n in flow else [])
                for n, j, m in cs
            ]  # fmt: skip
            out.append(report(host, docs, ts=now - 20 + i, busy=4.0, watts=150.0 + i))
    return out


def test_vismon_end_to_end(tmp_path: Path) -> None:
    for need, why in ((UI / "dist" / "index.html", "the built UI"),
                      (UI / "node_modules" / "playwright-core", "vismon-ui's npm packages"),
                      (Path("/usr/bin/chromium"), "Debian's chromium")):  # fmt: skip
        assert need.exists(), f"{need} is missing ({why}): run `make ui` (make test does)"
    port = free_port()
    repack = "[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\n"
    cfg = write_setup(tmp_path, port=port, extra=repack)
    ui_dir = f'[server]\nui_dir = "{UI / "dist"}"\n'
    cfg.write_text(cfg.read_text().replace("[server]\n", ui_dir))
    daemon = Daemon(cfg, port, tmp_path / "clavisd.log")
    daemon.start()
    try:
        for doc in _reports(time.time()):
            body = json.dumps(doc).encode()
            r = httpx.post(f"{daemon.url}/api/v1/reports", content=body,
                           headers=signed("/api/v1/reports", body), timeout=10)  # fmt: skip
            assert r.status_code == 202, r.text
        artifacts = UI / "e2e-artifacts"
        env = {**os.environ, "CLAVIS_URL": daemon.url, "ARTIFACTS": str(artifacts)}
        run = subprocess.run(["node", "e2e/run.mjs"], check=False, cwd=UI, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        print(run.stdout)
        assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n{daemon.log.read_text()[-3000:]}"
        assert "0 failed" in run.stdout
        for name in ("01-login", "03-calibrate", "03b-run-cancelled", "04-cluster",
                     "05-repack-dry-run", "10-large-calibrate", "11-large-cluster",
                     "12-large-history"):  # fmt: skip
            assert (artifacts / f"{name}.png").stat().st_size > 1000
    finally:
        daemon.stop()
