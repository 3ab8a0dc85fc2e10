"""The agent's HTTP API (stdlib server, one thread per request).

clavisd's contract: ``POST /api/v1/steps`` (a MigrationStep) and ``GET /api/v1/steps/{id}``,
both answering a StepStatus (200; a refused step is a ``failed`` status with the reason).
Agent to agent: ``/api/v1/peer/steps/{id}/prepare|files/PATH?offset=N[&patch=1]|seed|
finish|restore|commit|abort`` (incoming.py; ``seed`` and ``patch`` are pre-copy's).
Every request must be signed (clavis_contracts.signing): 401 otherwise; every answer is
signed back (peer.py). Malformed input: 422; unknown step: 404; a peer refusal: 409 with
``{"error": reason}``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError

from clavis_contracts import MigrationStep
from clavis_contracts.keys import (
    AgentKey,
    parse_peer_key_id,
    peer_step_secret,
    unwrap_peer_secret,
)
from clavis_contracts.signing import KEY_ID, NonceCache, SignatureError, key_id_of, sign, verify
from clavis_migrator.backend import BackendError
from clavis_migrator.incoming import Incoming, RefusedError
from clavis_migrator.peer import PEER_PREFIX, RESPONSE
from clavis_migrator.steps import Machine

log = logging.getLogger("clavis_migrator.server")

STEP_RE = re.compile(r"^/api/v1/steps/([0-9]+:[0-9]+)$")
PEER_RE = re.compile(
    r"^"
    + re.escape(PEER_PREFIX)
    + r"([0-9]+:[0-9]+)/(prepare|seed|finish|restore|commit|abort|files/(.+))$"
)


class Api:
    """What the handler needs; one per agent."""

    def __init__(
        self,
        keys: Sequence[AgentKey],
        max_skew_s: float,
        machine: Machine,
        incoming: Incoming,
        max_body: int,
    ) -> None:
        self.keys = {k.id: k for k in keys}
        self.max_skew_s = max_skew_s
        self.nonces = NonceCache(max_skew_s)
        # nonces are kept in memory only: refuse what was signed before this start
        self.started = time.time()
        self.machine = machine
        self.incoming = incoming
        self.max_body = max_body
        self.lock = threading.Lock()

    def key_for(self, key_id: str, path: str) -> tuple[bytes, AgentKey | None]:
        """The secret a request to ``path`` signed as ``key_id`` must be signed with, and
        the host key it is (None: a step's peer key); KeyError naming why not."""
        peer = parse_peer_key_id(key_id)
        if peer is None:
            key = self.keys.get(key_id)
            if key is None:
                raise KeyError(f"unknown key id {key_id[:64]!r}")
            if PEER_RE.match(urllib.parse.urlsplit(path).path):
                raise KeyError("a host key is clavisd's: it does not reach the peer paths")
            return key.secret_bytes, key
        target, source = peer
        m = PEER_RE.match(urllib.parse.urlsplit(path).path)
        if target not in self.keys or m is None:
            raise KeyError("a peer key reaches its own step's peer paths on its target only")
        return peer_step_secret(self.keys[target], m.group(1), source), None


class Handler(BaseHTTPRequestHandler):
    api: Api
    server_version = "clavis-migrator"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    # the secret and key id of the request being answered (None: it was not authentic)
    _answer_key: tuple[bytes, str] | None = None
    _verified_by: AgentKey | None = None

    def _send(self, code: int, doc: Any) -> None:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        # An answer is signed with the key its request was signed with; a refused
        # request's answer is unsigned (its sender learns nothing it could replay).
        ak = self._answer_key
        headers = {} if ak is None else sign(ak[0], RESPONSE, self.path, body, time.time(),
                                             key_id=ak[1])  # fmt: skip
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes | None:
        self._answer_key = self._verified_by = None  # a new request on this connection
        try:
            n = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            n = -1
        if not 0 <= n <= self.api.max_body:
            self.close_connection = True
            self._send(413, {"error": f"body must be 0..{self.api.max_body} bytes"})
            return None
        return self.rfile.read(n)

    def _authentic(self, body: bytes) -> bool:
        self._answer_key = self._verified_by = None
        key_id = key_id_of(dict(self.headers))
        try:
            if not key_id:
                raise SignatureError(f"missing {KEY_ID} header")
            try:
                secret, host_key = self.api.key_for(key_id, self.path)
            except KeyError as exc:
                raise SignatureError(str(exc.args[0])) from None
            with self.api.lock:
                verify(
                    secret, self.command, self.path, body, dict(self.headers),
                    now=time.time(), max_skew_s=self.api.max_skew_s, nonces=self.api.nonces,
                    not_before=self.api.started,
                )  # fmt: skip
        except SignatureError as exc:
            self._send(401, {"error": f"not authenticated: {exc}"})
            return False
        self._answer_key, self._verified_by = (secret, key_id), host_key
        return True

    def do_GET(self) -> None:
        body = self._body()
        if body is None or not self._authentic(body):
            return
        m = STEP_RE.match(self.path)
        if not m:
            self._send(404, {"error": f"no such resource {self.path}"})
            return
        rec = self.api.machine.store.get(m.group(1))
        if rec is None:
            self._send(404, {"error": f"step {m.group(1)} is unknown here"})
            return
        self._send(200, rec.status().model_dump_json().encode())

    def do_POST(self) -> None:
        self._write()

    def do_PUT(self) -> None:
        self._write()

    def _write(self) -> None:
        body = self._body()
        if body is None or not self._authentic(body):
            return
        if self.command == "POST" and self.path == "/api/v1/steps":
            try:
                step = _with_plain_peer_key(MigrationStep.model_validate_json(body),
                                            self._verified_by)  # fmt: skip
            except (ValidationError, ValueError) as exc:
                self._send(422, {"error": f"not a migration step: {exc}"})
                return
            rec = self.api.machine.submit(step)
            self._send(200, rec.status().model_dump_json().encode())
            return
        url = urllib.parse.urlsplit(self.path)
        m = PEER_RE.match(url.path)
        if not m:
            self._send(404, {"error": f"no such resource {self.path}"})
            return
        try:
            self._send(200, self._peer(m.group(1), m.group(2), m.group(3), url.query, body))
        except RefusedError as exc:
            self._send(409, {"error": str(exc)})
        except (ValidationError, ValueError, KeyError, TypeError) as exc:
            self._send(422, {"error": f"malformed: {exc}"})
        except BackendError as exc:
            self._send(409, {"error": str(exc)})
        except OSError as exc:  # the target's disk: full, read-only, gone
            self._send(507, {"error": f"on {self.api.incoming.host}: {exc}"})

    def _peer(self, step_id: str, what: str, rel: str | None, query: str, body: bytes) -> Any:
        inc = self.api.incoming
        if rel is not None and self.command == "PUT":
            q = urllib.parse.parse_qs(query)
            offset = int(q["offset"][0])
            patch = q.get("patch", ["0"])[0] == "1"
            inc.put(step_id, urllib.parse.unquote(rel), offset, body, patch=patch)
            return {"ok": True}
        if self.command != "POST":
            raise RefusedError(f"{self.command} not allowed here")
        if what == "prepare":
            step = MigrationStep.model_validate_json(body)
            if step.step_id != step_id:
                raise RefusedError("step id in the path and the body differ")
            return inc.prepare(step)
        if what == "seed":
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("seed must be an object")
            inc.seed(step_id, str(doc["path"]), str(doc["base"]), int(doc["size"]))
            return {"ok": True}
        if what == "finish":
            manifest = json.loads(body)
            if not isinstance(manifest, list):
                raise ValueError("manifest must be a list")
            inc.finish(step_id, manifest)
            return {"ok": True}
        if what == "restore":
            doc = json.loads(body or b"{}")
            fence_at = doc.get("fence_at") if isinstance(doc, dict) else None
            if not isinstance(fence_at, int | float) or isinstance(fence_at, bool):
                raise ValueError("restore needs fence_at, a time in seconds since the epoch")
            return inc.restore(step_id, float(fence_at))
        if what == "commit":
            inc.commit(step_id)
            return {"ok": True}
        return inc.abort(step_id)


def _with_plain_peer_key(step: MigrationStep, holder: AgentKey | None) -> MigrationStep:
    """The step with its peer key unwrapped by the host key clavisd signed it with; the
    agent keeps it so (its state directory is root's, 0700) to sign this step's calls to
    the target. ValueError when the step has none."""
    if holder is None or step.peer_key is None or step.peer_key_id is None:
        raise ValueError("the step has no peer key (peer_key, peer_key_id): clavisd too old?")
    plain = unwrap_peer_secret(holder, step.step_id, step.peer_key)
    return step.model_copy(update={"peer_key": plain.hex()})


def make_server(listen: str, port: int, api: Api) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"api": api})
    server = ThreadingHTTPServer((listen, port), handler)
    server.daemon_threads = True
    return server
