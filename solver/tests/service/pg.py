"""A private PostgreSQL cluster for the store tests: started by the test session, ended
only by its postmaster's PID.

Debian's server binaries (deploy/bootstrap/postgres.sh) run as the ``postgres`` user when
the tests run as root (initdb refuses root). The cluster lives in a temporary directory,
listens on a unix socket in that directory only (no TCP), on a port number no other
socket uses, with trust authentication (only the socket's directory gives access).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    if not found:
        raise RuntimeError(
            "PostgreSQL server binaries are missing: run deploy/bootstrap/postgres.sh as root"
        )
    return Path(found[-1]).parent


def _unused_port() -> int:
    # Only names the socket file (.s.PGSQL.PORT); a port free on TCP is unused there too.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.dir = Path(tempfile.mkdtemp(prefix="clavis-pg-"))
        self.data = self.dir / "data"
        self.port = _unused_port()
        self.pid: int | None = None
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._count = 0

    def _run(self, *cmd: str, timeout: float = 60) -> None:
        out = subprocess.run([*self._as, *cmd], capture_output=True, text=True,
                             timeout=timeout, check=False)  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({out.returncode}): {out.stderr or out.stdout}")

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync", timeout=120)  # fmt: skip
        opts = (f"-c listen_addresses='' -c unix_socket_directories={self.dir} "
                f"-p {self.port} -c fsync=off -c max_connections=60")  # fmt: skip
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts,
                  "-l", str(self.dir / "server.log"), "-w", "-t", "60", "start",
                  timeout=90)  # fmt: skip
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """SIGINT (fast shutdown) to our postmaster by PID, then wait for it to go."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGINT)
            except ProcessLookupError:
                self.pid = None
            deadline = time.monotonic() + 30
            while self.pid is not None and time.monotonic() < deadline:
                if not _running(self.pid):
                    self.pid = None
                    break
                time.sleep(0.1)
            if self.pid is not None:
                os.kill(self.pid, signal.SIGKILL)
                self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _conninfo(self, db: str) -> str:
        return f"host={self.dir} port={self.port} user=postgres dbname={db}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        self._count += 1
        name = f"clavis_{os.getpid()}_{self._count}"
        with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@/{name}?host={self.dir}&port={self.port}"


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its reaper (TESTBED-NOTES)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
