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
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from clavis.documents import describe
from clavis.service.auth import AuthError
from clavis_contracts import MonitorReport

if TYPE_CHECKING:
    from clavis.service.daemon import Clavisd

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


async def accept(d: Clavisd, headers: Mapping[str, str], body: bytes) -> Answer:
    """401 unauthenticated, 422 malformed, unknown host, stale or from the future, 409 not
    newer than the host's last report, 503 not stored; 202 once stored."""
    now = time.time()
    try:
        # The nonce is recorded with the report, in the transaction that stores it.
        signed = d.auth.check("POST", PATH, body, dict(headers), now, record=False)
    except AuthError as exc:
        return _no(401, f"unauthenticated: {exc}")
    try:
        report = MonitorReport.model_validate_json(body)
    except ValidationError as exc:
        return _no(422, f"malformed report: {describe(exc, None)}")
    ts = report.timestamp.timestamp()
    ingest = d.config.ingest
    if report.host not in d.host_names:
        return _no(422, f"unknown host {report.host!r}: not in the cluster file")
    if ts < now - ingest.max_report_age_s:
        return _no(422, f"stale report: {now - ts:.0f} s old (limit {ingest.max_report_age_s:g} s)")
    if ts > now + ingest.max_future_s:
        return _no(422, f"report timestamp is {ts - now:.0f} s in the future")
    last = d.last_report.get(report.host)
    if last is not None and ts <= last:
        return _no(409, f"report is not newer than the last one from {report.host!r}")
    d.last_report[report.host] = ts
    try:
        done = d.ingestor.submit(report, body, signed)
    except Exception:
        _restore(d, report.host, last)
        return _no(503, "ingest queue full; retry later")
    if not await done:
        _restore(d, report.host, last)
        return _no(503, "report could not be stored; retry later")
    return Answer(202, {"host": report.host, "timestamp": ts, "containers": len(report.containers)})


def _restore(d: Clavisd, host: str, last: float | None) -> None:
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

    def __init__(self, app: Any, d: Clavisd) -> None:
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
