"""Signed delivery of reports to clavisd, with retry, backoff and a bounded disk spool.

Manual equivalent: ``curl -X POST -H 'X-Clavis-...' --data @report.json
http://clavisd:7780/api/v1/reports``. Policy (docs/monitor.md): a report is POSTed at
once when nothing waits in the spool; otherwise, or when the POST fails (connection
error, 5xx, 401), it is written to the spool and the spool is drained oldest first with
exponential backoff. Beyond ``max_reports`` or ``max_bytes`` the OLDEST spooled reports
are dropped (counted): fresh data matters more for placement, and clavisd refuses
reports older than its ``ingest.max_backlog_s`` anyway (it stores older spooled reports
than its freshness window, ``max_report_age_s``: their signatures are fresh). A 422
(malformed, unknown host, stale) or 409 (not newer, e.g. a retry of a stored report) is
final: dropped, counted.
"""

from __future__ import annotations

import http.client
import logging
import os
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from clavis_contracts.keys import AgentKey
from clavis_contracts.signing import sign
from clavis_monitor.config import ClavisdConfig, SpoolConfig

log = logging.getLogger("clavis_monitor.sender")
PATH = "/api/v1/reports"


class Spool:
    """Reports waiting for clavisd: one file each, named by sequence, oldest first."""

    def __init__(self, cfg: SpoolConfig) -> None:
        self.dir = Path(cfg.dir)
        self.max_reports, self.max_bytes = cfg.max_reports, cfg.max_bytes
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._files = sorted(self.dir.glob("*.json"))
        self._bytes = sum(f.stat().st_size for f in self._files)
        self._next = int(self._files[-1].stem) + 1 if self._files else 1
        self.dropped = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._files)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, body: bytes) -> None:
        with self._lock:
            path = self.dir / f"{self._next:016d}.json"
            self._next += 1
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(body)
            os.replace(tmp, path)  # a crash leaves whole files only
            self._files.append(path)
            self._bytes += len(body)
            while len(self._files) > self.max_reports or self._bytes > self.max_bytes:
                self._remove(self._files[0])
                self.dropped += 1

    def _remove(self, path: Path) -> None:
        try:
            self._bytes -= path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
        self._files.remove(path)

    def oldest(self) -> tuple[Path, bytes] | None:
        with self._lock:
            while self._files:
                try:
                    return self._files[0], self._files[0].read_bytes()
                except FileNotFoundError:
                    self._files.pop(0)
            return None

    def done(self, path: Path) -> None:
        with self._lock:
            if path in self._files:
                self._remove(path)


@dataclass
class SendStats:
    sent: int = 0
    rejected: int = 0  # 4xx other than 401: dropped
    failures: int = 0  # attempts that failed and will be retried
    last_error: str = ""
    last_ok: float = 0.0


class Sender:
    """Owns the connection to clavisd and the spool drain thread."""

    def __init__(self, cfg: ClavisdConfig, spool: Spool, key: AgentKey) -> None:
        self.cfg, self.spool, self._key = cfg, spool, key
        url = urllib.parse.urlsplit(cfg.url)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "127.0.0.1", url.port
        self._prefix = url.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None
        self.stats = SendStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._backoff = cfg.backoff_min_s
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain_loop, name="sender", daemon=True)

    def start(self) -> Sender:
        self._thread.start()
        return self

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                trust = ssl.create_default_context(cafile=self.cfg.ca_file or None)
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self.cfg.timeout_s, context=trust
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self._host, self._port, timeout=self.cfg.timeout_s
                )
        return self._conn

    def _post(self, body: bytes) -> int | None:
        """HTTP status, or None when clavisd could not be reached."""
        path = self._prefix + PATH
        headers = {
            "Content-Type": "application/json",
            **sign(self._key.secret_bytes, "POST", path, body, time.time(), key_id=self._key.id),
        }
        try:
            conn = self._connection()
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            detail = resp.read()[:300]
        except (OSError, http.client.HTTPException) as exc:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self.stats.last_error = f"clavisd unreachable: {exc}"
            return None
        if resp.status >= 300:
            self.stats.last_error = (
                f"clavisd answered {resp.status}: {detail.decode(errors='replace')}"
            )
        return resp.status

    def _deliver(self, body: bytes) -> bool:
        """True when the report needs no more tries (stored or finally refused)."""
        status = self._post(body)
        if status is not None and status < 300:
            self.stats.sent += 1
            self.stats.last_ok = time.time()
            self._backoff = self.cfg.backoff_min_s
            return True
        if status is not None and 400 <= status < 500 and status != 401:
            self.stats.rejected += 1
            log.warning("report refused, dropped: %s", self.stats.last_error)
            return True
        self.stats.failures += 1
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.cfg.backoff_max_s)
        return False

    def submit(self, body: bytes) -> None:
        """Send now when nothing is spooled and no backoff runs; else spool."""
        with self._lock:
            if len(self.spool) == 0 and time.monotonic() >= self._retry_at and self._deliver(body):
                return
            self.spool.put(body)
        self._wake.set()

    def _drain_loop(self) -> None:
        while not self._stop.is_set():
            wait = max(0.0, self._retry_at - time.monotonic())
            self._wake.wait(timeout=wait if len(self.spool) else 60.0)
            self._wake.clear()
            while not self._stop.is_set() and time.monotonic() >= self._retry_at:
                with self._lock:
                    item = self.spool.oldest()
                    if item is None:
                        break
                    path, body = item
                    if not self._deliver(body):
                        break
                    self.spool.done(path)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.cfg.timeout_s + 2)
