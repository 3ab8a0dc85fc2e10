"""`clavis repack` against a real clavisd: dry run prints the plan; --apply without a
migrator agent stops with a clear error and leaves the plan pending."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import container, report, write_setup
from .process import Daemon, free_port

pytestmark = pytest.mark.slow


def test_repack_dry_run_and_apply_without_agent(tmp_path: Path) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\n"
             f'[migrator]\naddress = "127.0.0.1:{free_port()}"\ntimeout_s = 1\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port)
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    clavis = [str(Path(sys.executable).parent / "clavis"), "repack", "--config", str(cfg)]
    try:
        t0 = time.time() - 20
        for i in range(8):
            for host, names in (("h1", ("a1", "b1")), ("h2", ("a2", "b2"))):
                cs = [container(n, job=n[0], mpki=20.0) for n in names]
                d.call("POST", "/api/v1/reports", report(host, cs, ts=t0 + i))
            for host in ("h3", "h4"):
                d.call("POST", "/api/v1/reports", report(host, [], ts=t0 + i, busy=0))
        dry = subprocess.run([*clavis, "--dry-run"], capture_output=True, text=True,
                             timeout=120, check=False)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "decision: planned" in dry.stdout and "dry run: nothing moved" in dry.stdout
        assert " a1 " in dry.stdout or " b1 " in dry.stdout or " a2 " in dry.stdout
        applied = subprocess.run([*clavis, "--apply"], capture_output=True, text=True,
                                 timeout=120, check=False)  # fmt: skip
        assert applied.returncode == 1
        assert "no migrator agent answered" in applied.stderr
        plans = d.call("GET", "/api/v1/plans")
        assert [p["state"] for p in plans] == ["superseded", "pending"]
        assert all(s["state"] == "pending" for s in plans[1]["steps"])
    finally:
        d.stop()
    bad = subprocess.run([*clavis, "--url", f"http://127.0.0.1:{port}"], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and "did not answer" in bad.stderr
