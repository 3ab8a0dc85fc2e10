"""The ingest writer in its own process: same interface as ``ingest.Ingestor``.

Validating and authenticating reports (the API) and writing them (staging rows,
classification, SQLite) both need the CPU; in one process they share one interpreter
lock, which caps ingest at one core. Here the API process only queues each accepted
report's bytes; a child process re-validates them (the contract, cheap) and runs the
in-process Ingestor's batch write; the answer for each report comes back once its batch
is committed, so a 202 still means stored. The child exits when the pipe closes, so a
clavisd killed with -9 leaves no writer behind.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import queue
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from clavis.service.config import ClassifyConfig
from clavis.service.ingest import Ingestor, take_batch
from clavis.service.store import Store
from clavis_contracts import MonitorReport
from clavis_contracts.signing import Signed

log = logging.getLogger("clavisd.writer")
# Asks the child to finish: closing our end is not enough while a thread reads from it.
_STOP = b"stop"
# What crosses the pipe per report: its key, its bytes, its request's (timestamp, nonce).
_Item = tuple[int, bytes, tuple[int, str] | None]


def _child(conn: Connection, url: str, cfg: dict[str, Any]) -> None:
    store = Store(url)
    ingestor = Ingestor(store, ClassifyConfig.model_validate(cfg), 1, 0.0)
    conn.send_bytes(b"ready")
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break
        if data == _STOP:
            break
        items: list[_Item] = pickle.loads(data)
        reports = [MonitorReport.model_validate_json(raw) for _, raw, _ in items]
        signed = [Signed(*s) if s is not None else None for _, _, s in items]
        oks = ingestor.write_batch(reports, signed)
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
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=100_000)
        self._futures: dict[int, Future[None]] = {}
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
        self._sender.join(timeout_s)
        with contextlib.suppress(OSError):  # the child may be gone already
            self._conn.send_bytes(_STOP)
        self._proc.join(timeout_s)  # its end closes, so our reader sees EOF
        self._receiver.join(timeout_s)
        self._conn.close()

    def submit(
        self, report: MonitorReport, raw: bytes = b"", signed: Signed | None = None
    ) -> Future[None]:
        done: Future[None] = Future()
        with self._lock:
            key = self._next
            self._next += 1
            self._futures[key] = done
        try:
            nonce = None if signed is None else (signed.timestamp, signed.nonce)
            self._queue.put_nowait((key, raw or report.model_dump_json().encode(), nonce))
        except queue.Full:
            with self._lock:
                del self._futures[key]
            raise
        return done

    def _send(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            batch = take_batch(self._queue, self.batch_max, self.batch_wait_s)
            if batch:
                try:
                    self._conn.send_bytes(pickle.dumps(batch))
                except OSError:
                    log.error("ingest writer process is gone; %d reports not stored", len(batch))
                    self._settle([(item[0], False) for item in batch])

    def _receive(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes()
            except (EOFError, OSError):
                break
            self._settle(pickle.loads(data))
        with self._lock:  # the writer is gone: nothing pending will be stored
            left = [(key, False) for key in self._futures]
        self._settle(left)

    def _settle(self, results: list[tuple[int, bool]]) -> None:
        with self._lock:
            done = [(self._futures.pop(k, None), ok) for k, ok in results]
        for fut, ok in done:
            if fut is None:
                continue
            if ok:
                self.stored += 1
                fut.set_result(None)
            else:
                fut.set_exception(RuntimeError("report could not be stored"))
