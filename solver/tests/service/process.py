"""A real clavisd process for tests: started by the test, ended only by its own PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from .helpers import ADMIN, signed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """One clavisd process started by this test, ended only by its own PID."""

    def __init__(self, config: Path, port: int, log: Path, tls_ca: Path | None = None) -> None:
        """``tls_ca``: clavisd serves HTTPS with a certificate this CA file verifies."""
        self.config, self.port, self.log = config, port, log
        self.tls_ca = tls_ca
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None, args: Sequence[str] = ()) -> None:
        """Start clavisd with this process's environment plus ``env``, and ``args``."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([self.exe, "--config", str(self.config), *args],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})  # fmt: skip
        wait_for(self._healthy, 60, "clavisd to answer /health")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"clavisd exited {self.proc.returncode}: {self.log.read_text()}")
        try:
            r = httpx.get(f"{self.url}/api/v1/health", timeout=1, verify=self.verify)
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def exe(self) -> str:
        return str(Path(sys.executable).parent / "clavisd")

    @property
    def url(self) -> str:
        return f"{'http' if self.tls_ca is None else 'https'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return True if self.tls_ca is None else ssl.create_default_context(cafile=self.tls_ca)

    def children(self) -> list[int]:
        assert self.proc is not None
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()]

    def kill9(self) -> None:
        """SIGKILL by PID; then its writer child must end by itself (it sees EOF)."""
        assert self.proc is not None
        kids = self.children()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        wait_for(lambda: all(not _alive(k) for k in kids), 30, "clavisd's writer to exit")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def call(self, method: str, path: str, doc: Any = None) -> Any:
        body = b"" if doc is None else json.dumps(doc).encode()
        r = httpx.request(method, self.url + path, content=body,
                          headers=signed(path, body, method, by=_signer(path, doc)),
                          timeout=60, verify=self.verify)  # fmt: skip
        assert r.status_code < 300, r.text
        return r.json()


def _signer(path: str, doc: Any) -> str:
    """Reports are signed by their host's key, everything else by the admin key."""
    return str(doc["host"]) if path.endswith("/reports") else ADMIN


def wait_for(cond: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {limit_s} s waiting for {what}")


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
