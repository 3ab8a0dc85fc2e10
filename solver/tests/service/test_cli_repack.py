"""`clavis repack` against a real clavisd: a dry run prints the plan and changes nothing in
the store; --apply without a migrator agent stops with a clear error and leaves the plan
pending, and a later --apply supersedes it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import contention_reports, store_rows, write_setup
from .process import Daemon, free_port

pytestmark = pytest.mark.slow


def test_repack_dry_run_changes_nothing_and_apply_without_agent(tmp_path: Path) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\n"
             f'[migrator]\naddress = "127.0.0.1:{free_port()}"\ntimeout_s = 1\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port)
    url = f"sqlite:///{tmp_path / 'clavis.db'}"
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    clavis = [str(Path(sys.executable).parent / "clavis"), "repack", "--config", str(cfg)]

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*clavis, *flags], capture_output=True, text=True, timeout=120,
                              check=False)  # fmt: skip

    try:
        for doc in contention_reports(age=20):
            d.call("POST", "/api/v1/reports", doc)
        # Every table but the signed requests' nonces (kept so a request cannot be replayed).
        before = store_rows(url)
        assert len(before["containers"]) == 4 and len(before["container_samples"]) == 32
        dry = run("--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "decision: planned" in dry.stdout and "dry run: nothing stored" in dry.stdout
        assert "dry-run plan (not stored)" in dry.stdout
        assert " a1 " in dry.stdout or " b1 " in dry.stdout or " a2 " in dry.stdout
        # raw P, D, C, M before -> after: the plan separates the devils, so D falls
        objectives = re.search(r"^objectives (.*)$", dry.stdout, re.M)
        assert objectives, dry.stdout
        values = {k: (float(a), float(b)) for k, a, b in
                  re.findall(r"([PDCM]) (\S+) -> (\S+) ", objectives.group(1))}  # fmt: skip
        assert set(values) == {"P", "D", "C", "M"}, objectives.group(1)
        assert values["D"][1] < values["D"][0], values
        assert store_rows(url) == before
        assert d.call("GET", "/api/v1/plans") == []
        applied = run("--apply")
        assert applied.returncode == 1
        assert "no migrator agent answered" in applied.stderr
        (pending,) = d.call("GET", "/api/v1/plans")
        assert pending["state"] == "pending"
        # A dry run with a pending plan in the store: the plan is not superseded, and
        # nothing else changes either.
        before = store_rows(url)
        again = run()  # the default is a dry run
        assert again.returncode == 0 and "dry run: nothing stored" in again.stdout, again.stderr
        assert store_rows(url) == before
        assert d.call("GET", f"/api/v1/plans/{pending['id']}") == pending
        # Only a plan that is stored (--apply) replaces the pending one.
        assert run("--apply").returncode == 1
        plans = d.call("GET", "/api/v1/plans")
        assert [p["state"] for p in plans] == ["superseded", "pending"]
        assert all(s["state"] == "pending" for s in plans[1]["steps"])
    finally:
        d.stop()
    bad = subprocess.run([*clavis, "--url", f"http://127.0.0.1:{port}"], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and "did not answer" in bad.stderr
