"""Accepting one monitor report, and the ASGI fast path that serves it.

``POST /api/v1/reports`` is the one hot path (every host, every second). It is served by
:class:`ReportFastPath`, a thin ASGI layer in front of the FastAPI app, so a report costs
header parsing, the signature check, validation and the store, and not the framework's
routing, dependency solving and middleware; the FastAPI route of the same path (which
the OpenAPI document describes) calls the same :func:`accept`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from clavis.documents import describe
from clavis.service.auth import AuthError
from clavis.service.edge import Service
from clavis_contracts import MonitorReport

PATH = "/api/v1/reports"
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def _no(status: int, detail: str) -> Answer:
    return Answer(status, {"detail": detail})


async def accept(d: Service, headers: Mapping[str, str], body: bytes) -> Answer:
    """401 unauthenticated, 422 malformed, 403 signed by another host's key (or an admin
    key), 422 unknown host, stale or from the future, larger than its host, or failing in
    the store on its own; 409 not newer than the host's last report; 503 not stored now
    (the store failed); 202 once stored."""
    now = time.time()
    try:
        # The nonce is recorded with the report, in the transaction that stores it.
        signed, key = d.auth.check("POST", PATH, body, dict(headers), now, record=False)
    except AuthError as exc:
        return _no(401, f"unauthenticated: {exc}")
    try:
        report = MonitorReport.model_validate_json(body)
    except ValidationError as exc:
        return _no(422, f"malformed report: {describe(exc, None)}")
    if key.role != "agent" or key.host != report.host:
        # A host's key speaks for that host only (docs/clavisd.md, Security).
        return _no(403, f"forbidden: {key} may not report for host {report.host!r}")
    ts = report.timestamp.timestamp()
    ingest = d.config.ingest
    if report.host not in d.host_names:
        return _no(422, f"unknown host {report.host!r}: not in the cluster file")
    # A spooled report is old but freshly signed (the signature's own time is within
    # max_skew_s), so its age is a backlog, not a stale clock: stored up to max_backlog_s.
    if ts < now - ingest.max_backlog_s:
        return _no(422, f"stale report: {now - ts:.0f} s old (limit {ingest.max_backlog_s:g} s)")
    if ts > now + ingest.max_future_s:
        return _no(422, f"report timestamp is {ts - now:.0f} s in the future")
    over = over_capacity(report, d.host_cores[report.host])
    if over is not None:
        return _no(422, over)
    last = d.last_report.get(report.host)
    if last is not None and ts <= last:
        return _no(409, f"report is not newer than the last one from {report.host!r}")
    names = [c.name for c in report.containers]
    taken = d.claims.taken(report.host, names, ts, now, d.last_report, moving=d.moving)
    if taken:  # claims.py: a host cannot take another host's containers over
        held = ", ".join(f"{n!r} (host {o!r})" for n, o in taken[:5])
        return _no(409, f"containers still listed by their own host's fresh report: {held}")
    d.last_report[report.host] = ts
    try:
        done = d.ingestor.submit(report, body, signed)
    except Exception:
        _restore(d, report.host, last)
        return _no(503, "ingest queue full; retry later")
    written = await done
    if written != "stored":
        _restore(d, report.host, last)
        if written == "refused":  # final: a retry of the same bytes would fail the same way
            return _no(422, "report could not be stored (clavisd's log says why); not retried")
        return _no(503, "report could not be stored; retry later")
    d.claims.record(report.host, names, ts, d.last_report)
    return Answer(202, {"host": report.host, "timestamp": ts, "containers": len(report.containers)})


def over_capacity(report: MonitorReport, host_cores: int) -> str | None:
    """Why a report's containers cannot be on its host (the cluster file's cores), or None.
    A container the host cannot hold would make every placement infeasible, so the report
    is refused whole and named, rather than stored and poisoning every later repack."""
    for c in report.containers:
        if c.cores > host_cores:
            return (f"container {c.name!r} has {c.cores} cores but host {report.host!r} has "
                    f"{host_cores} (cluster file)")  # fmt: skip
    total = sum(c.cores for c in report.containers)
    if total > host_cores:
        return (f"containers of host {report.host!r} list {total} cores but the host has "
                f"{host_cores} (cluster file)")  # fmt: skip
    return None


def _restore(d: Service, host: str, last: float | None) -> None:
    if last is None:
        d.last_report.pop(host, None)
    else:
        d.last_report[host] = last


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None as soon as it exceeds ``limit`` bytes."""
    body = bytearray()
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if len(body) > limit:
            return None
        if not msg.get("more_body", False):
            return bytes(body)


class ReportFastPath:
    """ASGI: serve POST /api/v1/reports directly, hand everything else to ``app``."""

    def __init__(self, app: Any, d: Service) -> None:
        self.app = app
        self.d = d

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        limit = self.d.config.ingest.max_report_bytes
        declared = headers.get("content-length", "")
        body = None
        if not (declared.isdigit() and int(declared) > limit):
            body = await read_body(receive, limit)
        if body is None:
            answer = _no(413, f"report exceeds the limit of {limit} bytes")
        else:
            answer = await accept(self.d, headers, body)
        payload = json.dumps(answer.body).encode()
        await send({"type": "http.response.start", "status": answer.status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": payload})
