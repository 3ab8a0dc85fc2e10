"""A recorder of the migrator protocol, for tests of clavisd's executor only.

It is not an agent and cannot be mistaken for one: it moves nothing and touches no
container; it checks clavisd's signed requests and records what it was asked. To let the
executor's protocol (dispatch, poll, resume after a crash, never twice) be tested, a
step it has recorded is answered "running" and, after a delay, "done", every answer
saying in its message that nothing was moved (the message lands in clavisd's audit log).
It listens on loopback only, starts only inside a pytest test, and is never shipped
(solver/tests is not part of the clavis package; test_protocol_recorder checks nothing
else imports it). The real agent is clavis-migrator (a later issue).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from clavis_contracts import MigrationStep, StepStatus
from clavis_contracts.keys import AgentKey, peer_key_id, peer_step_secret, unwrap_peer_secret
from clavis_contracts.signing import NonceCache, SignatureError, key_id_of, verify

from .helpers import ADMIN, KEYS, POWER

# the hosts' keys as clavisd has them (helpers.KEYS), by key id
_HOST_KEYS = {
    kid: AgentKey(id=kid, host=who, secret=secret)
    for kid, (who, secret) in KEYS.items()
    if who not in (ADMIN, POWER)
}


def _peer_key_checks(step: MigrationStep, key: AgentKey) -> None:
    if key.host != step.source:
        raise SignatureError(f"step for source {step.source} signed with {key}")
    target = next(k for k in _HOST_KEYS.values() if k.host == step.target)
    if step.peer_key is None or step.peer_key_id != peer_key_id(target, step.source):
        raise SignatureError("the step lacks its peer key")
    got = unwrap_peer_secret(key, step.step_id, step.peer_key)
    if got != peer_step_secret(target, step.step_id, step.source):
        raise SignatureError("the step's peer key is not the target's")


@dataclass
class Record:
    posts: dict[str, list[float]] = field(default_factory=dict)
    accepted: dict[str, float] = field(default_factory=dict)  # step -> when it started
    steps: dict[str, MigrationStep] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)


NOTHING_MOVED = "protocol recorder (tests only): nothing was moved"


class ProtocolRecorder:
    """``hold_first_answer``: the first step sent is recorded, then its answer is held until
    ``release`` is set (``held`` says it is being held), so a test can kill clavisd between
    a dispatch and the agent's answer."""

    def __init__(self, delay_s: float, *, hold_first_answer: bool = False) -> None:
        if "PYTEST_CURRENT_TEST" not in os.environ:
            raise RuntimeError("the protocol recorder runs only inside a pytest test")
        self.delay_s = delay_s
        self.record = Record()
        self.lock = threading.Lock()
        self.hold_first_answer = hold_first_answer
        self.held = threading.Event()
        self.release = threading.Event()
        self.held_step = ""
        self.nonces = NonceCache(30)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ProtocolRecorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def status(self, step_id: str) -> StepStatus:
        started = self.record.accepted[step_id]
        done = time.time() - started >= self.delay_s
        return StepStatus(step_id=step_id, state="done" if done else "running",
                          message=NOTHING_MOVED, updated=dt.datetime.now(dt.UTC),
                          seconds=self.delay_s if done else None)  # fmt: skip

    def done_steps(self) -> list[str]:
        with self.lock:
            return [s for s in self.record.accepted if self.status(s).state == "done"]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _check(self, body: bytes) -> bool:
                """Signed with a host's key (the recorder answers for every host); a step
                is sent to its source with its key, and carries a peer key the target's
                key gives (clavis_contracts.keys)."""
                try:
                    key = _HOST_KEYS.get(key_id_of(dict(self.headers)))
                    if key is None:
                        raise SignatureError("not signed with a host's key")
                    with agent.lock:
                        verify(key.secret_bytes, self.command, self.path, body,
                               dict(self.headers), now=time.time(), max_skew_s=30,
                               nonces=agent.nonces)  # fmt: skip
                    if self.command == "POST":
                        _peer_key_checks(MigrationStep.model_validate_json(body), key)
                except SignatureError as exc:
                    agent.record.refused.append(str(exc))
                    self._answer(401, json.dumps({"detail": str(exc)}))
                    return False
                return True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if not self._check(body):
                    return
                step = MigrationStep.model_validate_json(body)
                with agent.lock:
                    agent.record.posts.setdefault(step.step_id, []).append(time.time())
                    # A step id seen before is a status query, never a second run.
                    agent.record.accepted.setdefault(step.step_id, time.time())
                    agent.record.steps[step.step_id] = step
                    out = agent.status(step.step_id)
                    hold = agent.hold_first_answer and not agent.held.is_set()
                    if hold:
                        agent.held_step = step.step_id
                        agent.held.set()
                if hold:
                    agent.release.wait(120)
                    with contextlib.suppress(OSError):  # the asker may be gone (killed)
                        self._answer(200, out.model_dump_json())
                    return
                self._answer(200, out.model_dump_json())

            def do_GET(self) -> None:
                if not self._check(b""):
                    return
                step_id = self.path.rsplit("/", 1)[1]
                with agent.lock:
                    if step_id not in agent.record.accepted:
                        self._answer(404, json.dumps({"detail": "unknown step"}))
                        return
                    out = agent.status(step_id)
                self._answer(200, out.model_dump_json())

        return Handler
