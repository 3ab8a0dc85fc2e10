"""Bounds on every request clavisd serves: body size, time to send it, time to send the
headers, and failed logins.

:class:`BoundedBodies` is the outermost ASGI layer: it reads each request's body up to the
limit of its path (a report: ``ingest.max_report_bytes``; ``/login``:
``server.login_max_bytes``; anything else: ``server.max_body_bytes``), answering 413 as
soon as the declared length or the bytes received pass it, and 408 when the body takes
longer than ``server.request_timeout_s``; only then does the request reach the API, with
its body replayed. :class:`GuardedH11Protocol` closes a connection whose request headers
are not complete within ``server.header_timeout_s`` (uvicorn's h11 server waits for them
for ever; its keep-alive timeout only runs between requests). :class:`LoginLimiter`
answers 429 with Retry-After once an address or a user name has failed to log in too
often.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOGIN_PATH: Final = "/api/v1/login"
REPORTS_PATH: Final = "/api/v1/reports"


@dataclass(frozen=True)
class BodyLimits:
    report_bytes: int
    login_bytes: int
    other_bytes: int
    timeout_s: float

    def for_path(self, path: str) -> int:
        if path == REPORTS_PATH:
            return self.report_bytes
        return self.login_bytes if path == LOGIN_PATH else self.other_bytes


async def _answer(send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode()),
               (b"connection", b"close"), *extra]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class BoundedBodies:
    """ASGI: bound each HTTP request's body in size and time before ``app`` sees it."""

    def __init__(self, app: Any, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    @property
    def state(self) -> Any:
        return self.app.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.for_path(scope["path"])
        too_big = f"request body exceeds the limit of {limit} bytes for {scope['path']}"
        declared = next((v for k, v in scope["headers"] if k.lower() == b"content-length"), b"")
        if declared.isdigit() and int(declared) > limit:
            await _answer(send, 413, too_big, [])
            return
        body = bytearray()
        deadline = time.monotonic() + self.limits.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                msg = await asyncio.wait_for(receive(), timeout=max(left, 0.001))
            except TimeoutError:
                detail = f"request body not received within {self.limits.timeout_s:g} s"
                await _answer(send, 408, detail, [])
                return
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if len(body) > limit:
                await _answer(send, 413, too_big, [])
                return
            if not msg.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives ``body`` once, then waits on the real one (a disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that does not complete its request
    headers within ``header_timeout_s`` (set by :func:`guarded_protocol`); a slow or
    stalled client cannot hold a connection open for ever."""

    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Waiting for (the rest of) a request's headers: the clock runs; past them, the
        # body's time is BoundedBodies's to bound.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._disarm()  # between requests uvicorn's keep-alive timeout applies

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(header_timeout_s: float) -> type[GuardedH11Protocol]:
    return type("GuardedH11", (GuardedH11Protocol,), {"header_timeout_s": header_timeout_s})


class LoginLimiter:
    """Failed logins per client address and per user name within a sliding window; past
    ``max_failures`` the next attempt is refused until the oldest failure leaves the
    window (429, Retry-After). A success does not clear an address's failures: guessing
    one user's password between right answers for another stays bounded."""

    def __init__(self, max_failures: int, window_s: float, max_keys: int = 100_000) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_keys = max_keys
        self._failed: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, keys: tuple[str, ...], now: float) -> int:
        """Seconds to wait before trying again, 0 when an attempt may go ahead."""
        with self._lock:
            wait = 0.0
            for k in keys:
                seen = self._recent(k, now)
                if len(seen) >= self.max_failures:
                    wait = max(wait, seen[0] + self.window_s - now)
            return math.ceil(wait) if wait > 0 else 0

    def failed(self, keys: tuple[str, ...], now: float) -> None:
        with self._lock:
            if len(self._failed) >= self.max_keys:  # bounded memory: forget the idle ones
                idle = now - self.window_s
                for k in [k for k, v in self._failed.items() if not v or v[-1] <= idle]:
                    del self._failed[k]
                while len(self._failed) >= self.max_keys:  # then the oldest inserted
                    del self._failed[next(iter(self._failed))]
            for k in keys:
                self._failed.setdefault(k, deque(maxlen=self.max_failures)).append(now)

    def _recent(self, key: str, now: float) -> deque[float]:
        seen = self._failed.get(key, deque())
        while seen and seen[0] <= now - self.window_s:
            seen.popleft()
        return seen
