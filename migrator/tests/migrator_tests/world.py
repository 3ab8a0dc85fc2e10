"""Two real agents on loopback over a backend that keeps its containers in a shared table.

The step machine, the signed HTTP API, the chunked transfer and the checksums all run for
real; only CRIU is replaced, by ``TableBackend``: a checkpoint writes the container's
"memory" into image files and marks it stopped, a restore reads them back on another
host. Faults are injected by name. The real LXC/CRIU backend is tested on the testbed
(tests/integration/test_migrator_lxc.py).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clavis_contracts import MigrationStep
from clavis_contracts.keys import AgentKey, with_peer_key
from clavis_contracts.signing import sign
from clavis_migrator.agent import Agent
from clavis_migrator.backend import BackendError, NotVerifiedError, Size
from clavis_migrator.config import parse

# Each host's agent key, as clavisd and that host's agents have it (clavis_contracts.keys).
KEYS = {
    h: AgentKey(id=f"{h}-k1", host=h, secret=f"migrator-test-key-of-{h}-0123456789")
    for h in ("h1", "h2", "h3", "h7", "h9")
}


def write_key_file(path: Path, *keys: AgentKey) -> Path:
    path.write_text("".join(
        f'[[keys]]\nid = "{k.id}"\nhost = "{k.host}"\nsecret = "{k.secret}"\n' for k in keys
    ))  # fmt: skip
    path.chmod(0o600)
    return path


@dataclass
class Table:
    """Where each container runs (None: stopped) and its memory."""

    where: dict[str, str | None] = field(default_factory=dict)
    memory: dict[str, bytes] = field(default_factory=dict)
    sizes: dict[str, Size] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class TableBackend:
    def __init__(self, host: str, table: Table) -> None:
        self.host, self.t = host, table
        self.fail: set[str] = set()  # "checkpoint", "checkpoint-stopped", "restore", "verify"
        self.hold: threading.Event | None = None  # checkpoint waits for it when set
        # what the running container does to its memory after each pre-copy dump
        self.dirty: Callable[[bytes], bytes] | None = None
        # called once a restore here has succeeded (a test cuts a link there)
        self.after_restore: Callable[[], None] | None = None

    def running(self) -> dict[str, Size]:
        with self.t.lock:
            return {n: self.t.sizes[n] for n, h in self.t.where.items() if h == self.host}

    def known(self, name: str) -> bool:
        return name in self.t.where

    def checkpoint(self, name: str, images: Path) -> None:
        self.t.calls.append(f"checkpoint {name} on {self.host}")
        if self.hold is not None:
            self.hold.wait(20)
        if "checkpoint" in self.fail:
            raise BackendError("criu dump: injected failure")
        (images / "inventory.img").write_bytes(b"inv")
        (images / "pages-1.img").write_bytes(self.t.memory[name])
        with self.t.lock:
            self.t.where[name] = None
        if "checkpoint-stopped" in self.fail:
            raise BackendError("criu dump: injected failure after stopping")

    def precheckpoint(self, name: str, images: Path) -> None:
        """A dump that leaves the container running; ``dirty`` then changes its memory."""
        self.t.calls.append(f"precheckpoint {name} on {self.host}")
        if "precheckpoint" in self.fail:
            raise BackendError("criu dump --leave-running: injected failure")
        (images / "inventory.img").write_bytes(b"inv")
        (images / "pages-1.img").write_bytes(self.t.memory[name])
        if self.dirty is not None:
            with self.t.lock:
                self.t.memory[name] = self.dirty(self.t.memory[name])

    def restore(self, name: str, images: Path) -> None:
        self.t.calls.append(f"restore {name} on {self.host}")
        if "restore" in self.fail:
            raise BackendError("criu restore: injected failure")
        if "restore-bug" in self.fail:
            raise RuntimeError("a bug in the backend")
        data = (images / "pages-1.img").read_bytes()
        with self.t.lock:
            if self.t.where[name] is not None:
                raise BackendError(f"{name} already runs on {self.t.where[name]}")
            self.t.where[name] = self.host
            self.t.memory[name] = data
        if self.after_restore is not None:
            self.after_restore()

    def verify(self, name: str) -> str:
        if "verify" in self.fail:
            raise BackendError("verify: injected failure")
        if "verify-checks" in self.fail:  # runs, a connection or slurmd not back
            raise NotVerifiedError(f"{name}: TCP connections not established: injected")
        return f"{name} up"

    def resume(self, name: str) -> None:
        self.t.calls.append(f"resume {name} on {self.host}")

    def kill(self, name: str) -> None:
        self.t.calls.append(f"kill {name} on {self.host}")
        with self.t.lock:
            if self.t.where.get(name) == self.host:
                self.t.where[name] = None

    def commit(self, name: str, images: Path) -> None:
        self.t.calls.append(f"commit {name} on {self.host}")


def make_agent(
    tmp: Path, host: str, table: Table, key: AgentKey | None = None, **opts: Any
) -> tuple[Agent, TableBackend]:
    """An agent of ``host`` with its key of KEYS (or ``key``)."""
    key = key or KEYS[host]
    key_file = write_key_file(tmp / f"{host}.key.toml", key)
    doc = {
        "host": host, "listen": "127.0.0.1", "port": 0, "key_file": str(key_file),
        "state_dir": str(tmp / host), "cores": 4, "memory_bytes": 4 * 2**30,
        "chunk_bytes": 4096, "peer_timeout_s": 5.0, **opts,
    }  # fmt: skip
    backend = TableBackend(host, table)
    agent = Agent(parse(doc), (key,), backend)
    agent.start()
    return agent, backend


def step(target_port: int, container: str = "c1", index: int = 0, **over: Any) -> MigrationStep:
    doc: dict[str, Any] = {
        "step_id": f"1:{index}", "plan": 1, "index": index, "wave": 0,
        "container": container, "source": "h1", "target": "h2",
        "target_address": f"127.0.0.1:{target_port}",
        "memory_bytes": 2**30, "cores": 1, "deadline_s": 60,
    }  # fmt: skip
    doc.update(over)
    return MigrationStep.model_validate(doc)


def call(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    key: AgentKey = KEYS["h1"],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """A request as clavisd signs it, with the agent's host key; (status, JSON answer)."""
    h = (
        headers
        if headers is not None
        else sign(key.secret_bytes, method, path, body, time.time(), key_id=key.id)
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def keyed(s: MigrationStep, to: str = "h1") -> MigrationStep:
    """The step as clavisd sends it to host ``to``'s agent (normally its source): with
    its peer key wrapped for that host's key (KEYS)."""
    return with_peer_key(s, KEYS[to], KEYS[s.target])


def post(port: int, s: MigrationStep, to: str = "h1") -> dict[str, Any]:
    """POST the step to the agent of host ``to`` (the tests' sources are h1)."""
    body = keyed(s, to).model_dump_json().encode()
    code, doc = call(port, "POST", "/api/v1/steps", body, key=KEYS[to])
    assert code == 200, doc
    return doc


def wait_terminal(port: int, step_id: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code, doc = call(port, "GET", f"/api/v1/steps/{step_id}")
        assert code == 200, doc
        if doc["state"] in ("done", "failed", "rolled_back") or time.monotonic() > deadline:
            return doc
        time.sleep(0.05)


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


def table(*names: str, memory: int = 10_000) -> Table:
    t = Table()
    for n in names:
        t.where[n] = "h1"
        t.memory[n] = os.urandom(memory)
        t.sizes[n] = Size(1, 2**30)
    return t


class Link:
    """The network between a source agent and a target agent's port: a loopback relay a
    test can cut (open connections dropped, new ones closed at once), make refuse new
    connections only (those open finish), and mend. The source is given its port."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.state = "up"  # "up" | "cut" | "refusing"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="link", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def cut(self) -> None:
        with self._lock:
            self.state = "cut"
            for s in self._open:
                s.close()
            self._open.clear()

    def refuse_new(self) -> None:
        self.state = "refusing"

    def mend(self) -> None:
        self.state = "up"

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.state != "up":
                client.close()
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while block := src.recv(65536):
                dst.sendall(block)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open -= {src, dst}
