"""Agent-to-agent calls: the source's agent drives the target's (prepare, files, restore...).

Both directions are signed with the step's peer key (clavis_contracts.keys: clavisd
derives it from the target host's key and hands it to the source, wrapped, inside the
step): requests as clavisd signs its own, and every answer of the target with the same key,
the method written ``RESPONSE`` and the path of the request it answers. A source that gets
an answer without a valid signature is talking to something that is not the step's target
agent and refuses to move anything to it.

Manual equivalent of one call (with the three X-Clavis-* headers made by ``sign``):
``curl -X POST --data @step.json http://TARGET:7781/api/v1/peer/steps/3:0/prepare``.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any, Final

from clavis_contracts import MigrationStep
from clavis_contracts.signing import NonceCache, SignatureError, sign, verify

RESPONSE: Final = "RESPONSE"
PEER_PREFIX: Final = "/api/v1/peer/steps/"


class PeerError(Exception):
    """The target agent could not be reached or refused; the message says which and why."""


class PeerRefusedError(PeerError):
    """The target agent answered and refused (4xx/5xx with its reason)."""


class PeerForgedError(PeerError):
    """The answer is not signed with the step's peer key: not the step's target agent."""


class PeerClient:
    """Signed calls from this (source) agent to one target agent."""

    def __init__(
        self,
        secret: bytes,
        address: str,
        timeout_s: float,
        max_skew_s: float,
        restore_timeout_s: float = 0.0,
        *,
        key_id: str,
    ) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise PeerError(f"target address {address!r} is not host:port")
        self.address = address
        self._host, self._port = host.strip("[]"), int(port)
        self._secret = secret
        self._key_id = key_id
        self.timeout_s = timeout_s
        # a restore (CRIU, verification, network hook) may take longer than other calls
        self.restore_timeout_s = max(timeout_s, restore_timeout_s)
        self.max_skew_s = max_skew_s
        self._nonces = NonceCache(max_skew_s)

    def _call(
        self, method: str, path: str, body: bytes = b"", timeout_s: float = 0.0
    ) -> dict[str, Any]:
        headers = sign(self._secret, method, path, body, time.time(), key_id=self._key_id)
        headers["Content-Type"] = (
            "application/octet-stream" if method == "PUT" else ("application/json")
        )
        conn = http.client.HTTPConnection(
            self._host, self._port, timeout=timeout_s or self.timeout_s
        )
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
            got = dict(r.getheaders())
        except (OSError, http.client.HTTPException) as exc:
            raise PeerError(f"target agent {self.address} unreachable: {exc}") from exc
        finally:
            conn.close()
        try:
            verify(
                self._secret, RESPONSE, path, data, got,
                now=time.time(), max_skew_s=self.max_skew_s, nonces=self._nonces,
            )  # fmt: skip
        except SignatureError as exc:
            raise PeerForgedError(
                f"the agent at {self.address} is not this step's target migrator "
                f"(its answer's signature: {exc})"
            ) from exc
        try:
            doc = json.loads(data) if data else {}
        except ValueError as exc:
            raise PeerError(f"target agent {self.address} answered non-JSON") from exc
        if not isinstance(doc, dict):
            raise PeerError(f"target agent {self.address} answered a non-object")
        if r.status >= 300:
            raise PeerRefusedError(str(doc.get("error", f"HTTP {r.status}")))
        return doc

    def _path(self, step_id: str, what: str) -> str:
        return f"{PEER_PREFIX}{step_id}/{what}"

    def prepare(self, step: MigrationStep) -> dict[str, Any]:
        # the target derives the peer key itself: it never goes over the network
        bare = step.model_copy(update={"peer_key": None, "peer_key_id": None})
        return self._call(
            "POST", self._path(step.step_id, "prepare"), bare.model_dump_json().encode()
        )

    def put(self, step_id: str, rel: str, offset: int, chunk: bytes, patch: bool = False) -> None:
        q = urllib.parse.quote(rel, safe="/")
        extra = "&patch=1" if patch else ""
        self._call("PUT", self._path(step_id, f"files/{q}?offset={offset}{extra}"), chunk)

    def seed(self, step_id: str, rel: str, base: str, size: int) -> None:
        """Pre-copy: the target makes ``rel`` from its copy of ``base`` (precopy.py)."""
        body = json.dumps({"path": rel, "base": base, "size": size}).encode()
        self._call("POST", self._path(step_id, "seed"), body)

    def finish(self, step_id: str, manifest: list[dict[str, Any]]) -> None:
        self._call("POST", self._path(step_id, "finish"), json.dumps(manifest).encode())

    def restore(self, step_id: str, fence_at: float) -> str:
        """Restore on the target, which kills its copy at ``fence_at`` (epoch s) unless it
        has heard the commit by then (fencing: see Incoming.expire)."""
        body = json.dumps({"fence_at": fence_at}).encode()
        got = self._call(
            "POST", self._path(step_id, "restore"), body, timeout_s=self.restore_timeout_s
        )
        return str(got.get("verified", ""))

    def commit(self, step_id: str) -> None:
        self._call("POST", self._path(step_id, "commit"))

    def abort(self, step_id: str) -> str:
        return str(self._call("POST", self._path(step_id, "abort")).get("did", ""))
