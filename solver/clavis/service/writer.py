"""The ingest writer in its own process: same interface as ``ingest.Ingestor``.

Validating and authenticating reports (the API) and writing them (staging rows,
classification, SQLite) both need the CPU; in one process they share one interpreter
lock, which caps ingest at one core. Here the API process only queues each accepted
report's bytes (with its timestamp and nonce); a child process parses them as plain
JSON (the API validated them against the contract already, so they are not
validated twice) and runs the in-process Ingestor's batch write; the answer for each
report comes back once its batch is committed, so a 202 still means stored. The child
exits when the pipe closes, so a clavisd killed with -9 leaves no writer behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from pydantic_core import from_json

from clavis.service.config import ClassifyConfig
from clavis.service.gcpolicy import long_lived_heap
from clavis.service.ingest import Accepted, Ingestor, Outcome, Written, settle
from clavis.service.store import Store
from clavis_contracts import MonitorReport
from clavis_contracts.signing import Signed

log = logging.getLogger("clavisd.writer")
# Asks the child to finish: closing our end is not enough while a thread reads from it.
_STOP = b"stop"
# What crosses the pipe per report: its key, its bytes, its timestamp, and its request's
# (signature timestamp, nonce).
_Item = tuple[int, bytes, float, tuple[int, str] | None]


def _child(conn: Connection, url: str, cfg: dict[str, Any]) -> None:
    store = Store(url)
    ingestor = Ingestor(store, ClassifyConfig.model_validate(cfg), 1, 0.0)
    long_lived_heap()
    conn.send_bytes(b"ready")
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break
        if data == _STOP:
            break
        items: list[_Item] = pickle.loads(data)
        batch = [Accepted(ts, from_json(raw), None if n is None else Signed(*n))
                 for _, raw, ts, n in items]  # fmt: skip
        oks = ingestor.write_batch(batch)
        conn.send_bytes(pickle.dumps([(i[0], ok) for i, ok in zip(items, oks, strict=True)]))
    store.close()
    conn.close()


class ProcessIngestor:
    def __init__(self, url: str, cfg: ClassifyConfig, batch_max: int, batch_wait_s: float):
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded process
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child, args=(child, url, cfg.model_dump()),
                                 name="clavisd-writer", daemon=True)  # fmt: skip
        self._child_end = child
        self.batch_max = batch_max
        self.batch_wait_s = batch_wait_s
        self.stored = 0
        # Reports wait in a deque (append and popleft are atomic): the event loop does not
        # wake the sender per report, only when it is idle (the Event).
        self._items: deque[_Item] = deque()
        self._wake = threading.Event()
        # One batch in flight: while the child writes one, the next one grows, so batches
        # (and transactions) get larger exactly when the writer is the bottleneck.
        self._idle = threading.Event()
        self._idle.set()
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Written]]] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._stop = threading.Event()
        self._sender = threading.Thread(target=self._send, name="writer-send", daemon=True)
        self._receiver = threading.Thread(target=self._receive, name="writer-recv", daemon=True)

    def start(self) -> None:
        self._proc.start()
        self._child_end.close()
        if not self._conn.poll(60) or self._conn.recv_bytes() != b"ready":
            raise RuntimeError("the ingest writer process did not start")
        self._sender.start()
        self._receiver.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._sender.join(timeout_s)
        with contextlib.suppress(OSError):  # the child may be gone already
            self._conn.send_bytes(_STOP)
        self._proc.join(timeout_s)  # its end closes, so our reader sees EOF
        self._receiver.join(timeout_s)
        self._conn.close()

    def submit(
        self, report: MonitorReport, raw: bytes = b"", signed: Signed | None = None
    ) -> asyncio.Future[Written]:
        """Queue a report (from the event loop); the future says whether it was stored."""
        if len(self._items) >= 100_000:
            raise OverflowError("ingest queue full")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Written] = loop.create_future()
        with self._lock:
            key = self._next
            self._next += 1
            self._waiting[key] = (loop, done)
        nonce = None if signed is None else (signed.timestamp, signed.nonce)
        raw = raw or report.model_dump_json().encode()
        self._items.append((key, raw, report.timestamp.timestamp(), nonce))
        if not self._wake.is_set():
            self._wake.set()
        return done

    def _take(self) -> list[_Item]:
        """Up to ``batch_max`` reports: wait for the first, then ``batch_wait_s`` for more."""
        if not self._items:
            self._wake.wait(0.2)
            self._wake.clear()
            if not self._items:
                return []
            self._stop.wait(self.batch_wait_s)
        n = min(len(self._items), self.batch_max)
        return [self._items.popleft() for _ in range(n)]

    def _send(self) -> None:
        while not self._stop.is_set() or self._items:
            while not self._idle.wait(0.2):
                if not self._proc.is_alive():
                    break
            batch = self._take()
            if batch:
                self._idle.clear()
                try:
                    self._conn.send_bytes(pickle.dumps(batch))
                except OSError:
                    log.error("ingest writer process is gone; %d reports not stored", len(batch))
                    self._settle([(item[0], "retry") for item in batch])

    def _receive(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                break
            self._settle(pickle.loads(data))
            self._idle.set()
        self._idle.set()
        with self._lock:  # the writer is gone: nothing pending will be stored
            left: list[tuple[int, Written]] = [(key, "retry") for key in self._waiting]
        self._settle(left)

    def _settle(self, results: list[tuple[int, Written]]) -> None:
        outcomes: list[Outcome] = []
        with self._lock:
            for key, written in results:
                waiting = self._waiting.pop(key, None)
                if waiting is not None:
                    outcomes.append((*waiting, written))
                    self.stored += written == "stored"
        settle(outcomes)
