"""Job steps registered by spank_clavis.so, and the UNIX socket server that takes them.

Manual equivalent:
``printf '%s\\n' '{"op":"register",...}' | socat - UNIX:/run/clavis/monitor.sock``.
The wire rules are in docs/monitor.md; the messages in clavis_contracts.registration.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from clavis_contracts.registration import (
    MAX_MESSAGE_BYTES,
    ClassHint,
    DeregisterStep,
    RegisterStep,
    RegistrationReply,
    RegistrationRequest,
)
from clavis_monitor import pidns

log = logging.getLogger("clavis_monitor.registry")
MAX_STEPS = 65536  # registered steps kept at once; beyond it a register is refused
MAX_CONNECTIONS = 64  # handled at once; more wait in the listen backlog


@dataclass
class Step:
    node: str
    job_id: int
    step_id: int
    pids: set[int] = field(default_factory=set)
    cgroups: set[str] = field(default_factory=set)
    uid: int | None = None
    app: str | None = None  # the application key (clavis_contracts.application)
    class_hint: ClassHint = "auto"
    since: float = 0.0


@dataclass(frozen=True)
class NodeJob:
    """What the registrations say runs in one container now."""

    job: str
    app: str | None
    class_hint: ClassHint


class Registry:
    """Thread-safe: the socket server writes, the samplers read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, int, int], Step] = {}
        self.accepted = 0
        self.refused = 0

    def apply(self, request: RegistrationRequest, now: float) -> str | None:
        """Apply a valid request; an error string when it is refused."""
        msg = request.root
        key = (msg.node, msg.job_id, msg.step_id)
        with self._lock:
            if isinstance(msg, DeregisterStep):
                self._steps.pop(key, None)
                return None
            step = self._steps.get(key)
            if step is None:
                if len(self._steps) >= MAX_STEPS:
                    return f"too many registered steps ({MAX_STEPS})"
                step = self._steps[key] = Step(msg.node, msg.job_id, msg.step_id, since=now)
            step.pids.update(msg.pids)
            step.cgroups.update(msg.cgroups)
            step.uid = msg.uid if msg.uid is not None else step.uid
            step.app = msg.application() or step.app
            if msg.class_hint != "auto":
                step.class_hint = msg.class_hint
        return None

    def steps(self) -> list[Step]:
        with self._lock:
            return list(self._steps.values())

    def node_jobs(self) -> dict[str, NodeJob]:
        """Per container, the job of its most recently registered step."""
        best: dict[str, Step] = {}
        with self._lock:
            for s in self._steps.values():
                cur = best.get(s.node)
                if cur is None or s.since >= cur.since:
                    best[s.node] = s
            return {n: NodeJob(str(s.job_id), s.app, s.class_hint) for n, s in best.items()}

    def prune(self, alive: set[str]) -> int:
        """Forget steps whose pids have all exited (a lost deregister); how many."""
        gone = 0
        with self._lock:
            for key, s in list(self._steps.items()):
                if s.node not in alive or not any(Path(f"/proc/{p}").exists() for p in s.pids):
                    del self._steps[key]
                    gone += 1
        return gone


def _peer_creds(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the peer, both in the monitor's namespaces (the kernel translates)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return int(pid), int(uid)


def in_monitor_view(request: RegistrationRequest, peer_pid: int) -> RegistrationRequest:
    """A register's pids (and cgroups) as the monitor sees them (clavis_monitor.pidns).

    The sender's cgroup paths are dropped when it is in another cgroup namespace (they
    are relative to it); pids that are no live process of the sender's namespace are
    left out. Raises PidNamespaceError when none is left or the peer cannot be read."""
    msg = request.root
    if not isinstance(msg, RegisterStep):
        return request
    sender = pidns.peer(peer_pid)
    if sender.same_pid_ns and sender.same_cgroup_ns:
        return request
    mapped = pidns.translate(sender, msg.pids)
    if not mapped:
        raise pidns.PidNamespaceError(
            f"no pid of {msg.pids[:8]} is a live process of the sender's pid namespace"
        )
    pids = [mapped[p] for p in msg.pids if p in mapped]
    cgroups = msg.cgroups if sender.same_cgroup_ns else []
    return RegistrationRequest(root=msg.model_copy(update={"pids": pids, "cgroups": cgroups}))


def _where(loc: tuple[int | str, ...]) -> str:
    """``job_id: `` for an error at that field (the union's tag left out)."""
    parts = [str(p) for p in loc if p not in ("register", "deregister")]
    return ".".join(parts) + ": " if parts else ""


def _reply(conn: socket.socket, ok: bool, error: str | None = None) -> None:
    line = RegistrationReply(ok=ok, error=None if error is None else error[:1024])
    conn.sendall(line.model_dump_json().encode() + b"\n")


def _read_line(conn: socket.socket, deadline: float) -> bytes | None:
    """The request line without its newline; None on timeout or EOF before it; raises
    ValueError when it exceeds the size limit."""
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            return None
        if not chunk:
            return None
        buf += chunk
        nl = buf.find(b"\n")
        if nl >= 0:
            if nl + 1 > MAX_MESSAGE_BYTES:
                raise ValueError(f"request exceeds {MAX_MESSAGE_BYTES} bytes")
            return bytes(buf[:nl])
        if len(buf) >= MAX_MESSAGE_BYTES:
            raise ValueError(f"request exceeds {MAX_MESSAGE_BYTES} bytes")


class RegistrationServer:
    """Serves the registration socket on its own threads until ``close``."""

    def __init__(
        self, path: Path, registry: Registry, timeout_s: float = 2.0, require_root: bool = True
    ) -> None:
        self.path, self.registry, self.timeout_s = path, registry, timeout_s
        self.require_root = require_root
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if path.is_socket():
            path.unlink()  # a stale socket of a previous run
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: no window for other users
        try:
            self._sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self._sock.listen(128)
        self._thread = threading.Thread(target=self._accept, name="registration", daemon=True)
        self._closed = False

    def start(self) -> RegistrationServer:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._slots.acquire()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._handle(conn)
        except OSError as exc:
            log.info("registration: connection failed: %s", exc)
        finally:
            self._slots.release()

    def _handle(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.timeout_s
        peer_pid, uid = _peer_creds(conn)
        if self.require_root and uid != 0:
            self.registry.refused += 1
            _reply(conn, False, f"peer uid {uid} is not root")
            return
        try:
            line = _read_line(conn, deadline)
        except ValueError as exc:
            self.registry.refused += 1
            _reply(conn, False, str(exc))
            return
        if line is None:
            return  # timeout or closed early: no reply (docs/monitor.md)
        try:
            request = RegistrationRequest.model_validate_json(line)
        except ValidationError as exc:
            self.registry.refused += 1
            problems = "; ".join(_where(e["loc"]) + e["msg"] for e in exc.errors(include_url=False))
            _reply(conn, False, problems)
            return
        try:
            request = in_monitor_view(request, peer_pid)
        except pidns.PidNamespaceError as exc:
            self.registry.refused += 1
            _reply(conn, False, str(exc))
            return
        error = self.registry.apply(request, time.time())
        if error is None:
            self.registry.accepted += 1
        else:
            self.registry.refused += 1
        _reply(conn, error is None, error)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self.path.unlink(missing_ok=True)
