"""Replay protection survives a restart: requests a real clavisd accepted before a kill -9
are refused as replays after it restarts, while their timestamps are still fresh."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from .helpers import container, report, signed, write_setup
from .process import Daemon, free_port, wait_for

pytestmark = pytest.mark.slow


def _send(d: Daemon, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(d.url + path, content=body, headers=headers, timeout=30)


def test_requests_seen_before_a_restart_are_refused_after_it(
    tmp_path: Path, store_url: str
) -> None:
    port = free_port()
    # (extra starts inside write_setup's [advice] table: advice every second)
    cfg = write_setup(tmp_path, port=port, store_url=store_url,
                      extra="valid_s = 3\n[repack]\ninterval_s = 0\n")  # fmt: skip
    d = Daemon(cfg, port, tmp_path / "clavisd.log")
    d.start()
    # Signed by agents whose clocks run 10 s ahead (within the 30 s skew): refusing what
    # was signed before the restart would not stop these replays, the stored nonces do.
    ahead = time.time() + 10
    captured = []
    try:
        rep = json.dumps(report("h1", [container("n1")], ts=time.time())).encode()
        captured.append(
            ("/api/v1/reports", rep, signed("/api/v1/reports", rep, now=ahead, by="h1"))
        )
        captured.append(("/api/v1/power-models/fit", b"",
                         signed("/api/v1/power-models/fit", b"", now=ahead)))  # fmt: skip
        for path, body, headers in captured:
            first = _send(d, path, body, headers)
            assert first.status_code < 300, first.text
            again = _send(d, path, body, headers)
            assert again.status_code == 401 and "replayed" in again.json()["detail"]
        d.kill9()
        d.start()
        for path, body, headers in captured:
            assert time.time() < ahead + 25, "the replay must come while still fresh"
            r = _send(d, path, body, headers)
            assert r.status_code == 401, (path, r.text)
            assert "replayed" in r.json()["detail"], r.text
        # Fresh requests are served as before.
        rep = json.dumps(report("h1", [container("n1")], ts=time.time() + 1)).encode()
        r = _send(d, "/api/v1/reports", rep, signed("/api/v1/reports", rep, by="h1"))
        assert r.status_code == 202, r.text
        assert d.call("GET", "/api/v1/health")["reports_stored"] == 1
        # The advice (built by clavisd's advice process, a second child) names n1 on h1.
        spawned = [k for k in d.children()
                   if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes()]  # fmt: skip
        assert len(spawned) == 2, "clavisd runs an ingest writer and an advice process"
        advice = tmp_path / "advice.json"

        def advised() -> bool:
            try:
                nodes = json.loads(advice.read_text())["nodes"]
            except (OSError, ValueError):
                return False
            return any(n["node"] == "n1" and n["host"] == "h1" for n in nodes)

        wait_for(advised, 30, "the advice file to name n1 on h1")
    finally:
        d.stop()
