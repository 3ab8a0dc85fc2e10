"""A client of the LXD/Incus REST API on the daemon's local UNIX socket.

Manual equivalent::

    curl -s --unix-socket /var/lib/lxd/unix.socket http://lxd/1.0/instances/NAME
    curl -s --unix-socket /var/lib/lxd/unix.socket -X PUT \\
        -d '{"action":"stop","stateful":true}' http://lxd/1.0/instances/NAME/state
    curl -s --unix-socket /var/lib/lxd/unix.socket http://lxd/1.0/operations/ID/wait

Every answer is a JSON object with a ``type``: ``sync`` (the result in ``metadata``),
``async`` (202, an operation in ``metadata``, its URL in ``operation``) or ``error``
(``error_code`` and ``error``). An operation ends ``Success`` or ``Failure`` (its ``err``
says why); ``GET /1.0/operations/ID/wait?timeout=S`` answers when it has ended or after S
seconds. The same API serves LXD and Incus. Parsing is pure (``parse_answer``,
``parse_operation``); ``Client`` does the I/O.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from clavis_migrator.backend import BackendError

MAX_ANSWER_BYTES: Final = 16 * 2**20


class LxdError(BackendError):
    """The daemon could not be asked, or its answer is an error or not its API's."""


class LxdNotFoundError(LxdError):
    """The daemon answered 404 (no such instance or operation)."""


@dataclass(frozen=True)
class Answer:
    """One answer of the API: ``kind`` sync or async, the metadata, an operation URL."""

    kind: str
    metadata: Any
    operation: str


@dataclass(frozen=True)
class Operation:
    """A background operation: its id, state (Running, Success, Failure, Cancelled...),
    the reason of a failure, and the operation's own metadata (e.g. migration secrets)."""

    id: str
    status: str
    err: str
    description: str
    metadata: Any

    @property
    def done(self) -> bool:
        return self.status in ("Success", "Failure", "Cancelled")


def parse_answer(what: str, status: int, body: bytes) -> Answer:
    """The answer to request ``what`` (e.g. ``PUT /1.0/instances/n1/state``); LxdError for
    an error answer or anything that is not one of the API's answers."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise LxdError(f"{what}: HTTP {status}, not JSON: {body[:80]!r}") from None
    if not isinstance(doc, dict) or "type" not in doc:
        raise LxdError(f"{what}: HTTP {status}, not an LXD answer: {body[:80]!r}")
    kind = doc.get("type")
    if kind == "error" or status >= 400:
        code = doc.get("error_code") or status
        why = str(doc.get("error") or f"HTTP {status}")[:300]
        cls = LxdNotFoundError if code == 404 else LxdError
        raise cls(f"{what}: {why} (HTTP {code})")
    if kind not in ("sync", "async"):
        raise LxdError(f"{what}: HTTP {status}, answer of type {kind!r}")
    operation = doc.get("operation") or ""
    if kind == "async" and not (isinstance(operation, str) and operation):
        raise LxdError(f"{what}: an async answer without its operation")
    return Answer(str(kind), doc.get("metadata"), str(operation))


def parse_operation(what: str, meta: Any) -> Operation:
    """The operation object of an async answer or of ``.../wait``."""
    if not isinstance(meta, dict) or not isinstance(meta.get("id"), str):
        raise LxdError(f"{what}: not an operation: {str(meta)[:120]}")
    return Operation(
        id=meta["id"], status=str(meta.get("status", "")), err=str(meta.get("err") or ""),
        description=str(meta.get("description") or ""), metadata=meta.get("metadata"),
    )  # fmt: skip


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("lxd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Client:
    """Requests to one daemon's socket, in one project."""

    def __init__(self, socket_path: str, project: str, timeout_s: float) -> None:
        self.socket = socket_path
        self.project = project
        self.timeout_s = timeout_s

    def url(self, path: str, **query: str) -> str:
        """``path`` with the project and ``query`` added (names quoted by the caller)."""
        q = dict(query)
        if self.project != "default":
            q["project"] = self.project
        return f"{path}?{urllib.parse.urlencode(q)}" if q else path

    def call(
        self, method: str, url: str, body: Any = None, timeout_s: float | None = None
    ) -> Answer:
        what = f"{method} {url}"
        if not Path(self.socket).exists():
            raise LxdError(
                f"{what}: no LXD/Incus socket at {self.socket} (is the daemon running? "
                "lxd.socket in the migrator's config names it)"
            )
        data = None if body is None else json.dumps(body).encode()
        headers = {} if data is None else {"Content-Type": "application/json"}
        conn = _UnixConnection(self.socket, timeout_s or self.timeout_s)
        try:
            conn.request(method, url, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(MAX_ANSWER_BYTES + 1)
        except TimeoutError:
            raise LxdError(f"{what}: no answer from {self.socket} in time") from None
        except (OSError, http.client.HTTPException) as exc:
            raise LxdError(f"{what}: {self.socket}: {exc}") from exc
        finally:
            conn.close()
        if len(raw) > MAX_ANSWER_BYTES:
            raise LxdError(f"{what}: answer larger than {MAX_ANSWER_BYTES} bytes")
        return parse_answer(what, resp.status, raw)

    def get(self, path: str, **query: str) -> Any:
        """The metadata of the sync answer to ``GET path``."""
        ans = self.call("GET", self.url(path, **query))
        if ans.kind != "sync":
            raise LxdError(f"GET {path}: expected a sync answer, got {ans.kind}")
        return ans.metadata

    def start_operation(self, method: str, path: str, body: Any) -> Operation:
        """Send a request LXD answers with an operation; that operation as created."""
        url = self.url(path)
        ans = self.call(method, url, body)
        if ans.kind != "async":
            raise LxdError(f"{method} {url}: expected an operation, got a {ans.kind} answer")
        return parse_operation(f"{method} {url}", ans.metadata)

    def wait(self, op_id: str, timeout_s: float) -> Operation:
        """The operation once it has ended; LxdError when it has not within the timeout."""
        secs = max(1, int(timeout_s))
        path = f"/1.0/operations/{urllib.parse.quote(op_id, safe='')}/wait"
        ans = self.call("GET", self.url(path, timeout=str(secs)), timeout_s=secs + 10)
        op = parse_operation(f"GET {path}", ans.metadata)
        if not op.done:
            raise LxdError(f"operation {op_id} ({op.description}) still {op.status} after {secs} s")
        return op

    def run(self, method: str, path: str, body: Any, timeout_s: float) -> Operation:
        """Start an operation and wait for it; LxdError naming its ``err`` if it failed."""
        op = self.wait(self.start_operation(method, path, body).id, timeout_s)
        if op.status != "Success":
            raise LxdError(f"{op.description or method + ' ' + path}: {op.status}: {op.err}")
        return op
