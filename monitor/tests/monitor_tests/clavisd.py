"""A real clavisd for the monitor's delivery tests: started by the test, ended by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from clavis_contracts.keys import AgentKey

KEY = AgentKey(id="h1-k1", host="h1", secret="monitor-test-key-of-h1-0123456789")
ADMIN_KEY = AgentKey(id="admin-k1", role="admin", secret="monitor-test-admin-key-0123456789")


def write_key_file(path: Path, *keys: AgentKey) -> Path:
    """A private key file (clavis_contracts.keys) listing ``keys``."""
    path.write_text("".join(
        f'[[keys]]\nid = "{k.id}"\n'
        + (f'host = "{k.host}"\n' if k.role == "agent" else 'role = "admin"\n')
        + f'secret = "{k.secret}"\n'
        for k in keys
    ))  # fmt: skip
    path.chmod(0o600)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Containers without a cpuset report every core of the machine (clavis_monitor.containers
# .cores), and clavisd refuses a report whose containers add up to more cores than the
# host has: the test host has room for a few such containers on any machine.
HOST_CORES = 8 * max(1, os.cpu_count() or 1)


def write_setup(
    tmp: Path, port: int, hosts: tuple[str, ...] = ("h1",), max_report_age_s: float = 3600
) -> Path:
    cluster = {
        "name": "monitor-test",
        "hosts": [
            {"name": h, "rack": "r1", "cores": HOST_CORES,
             "domains": {"count": 2, "cores_per_domain": HOST_CORES // 2},
             "power": {"idle_w": 100, "peak_w": 180, "off_w": 10}}
            for h in hosts
        ],
    }  # fmt: skip
    (tmp / "cluster.yaml").write_text(json.dumps(cluster))  # JSON is YAML
    keys = write_key_file(tmp / "agent-keys.toml", KEY, ADMIN_KEY)
    cfg = tmp / "clavis.toml"
    cfg.write_text(
        f'cluster_file = "{tmp / "cluster.yaml"}"\n'
        f"[server]\nport = {port}\n"
        f'[store]\nurl = "sqlite:///{tmp / "clavis.db"}"\n'
        f'[security]\nagent_keys_file = "{keys}"\n'
        f'[advice]\npath = "{tmp / "advice.json"}"\n'
        f'[ingest]\nmax_report_age_s = {max_report_age_s}\nwriter = "thread"\n'
        "[repack]\ninterval_s = 0\n"
    )
    return cfg


class Clavisd:
    def __init__(self, tmp: Path, max_report_age_s: float = 3600) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.config = write_setup(tmp, self.port, max_report_age_s=max_report_age_s)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        exe = Path(sys.executable).parent / "clavisd"
        with (self.tmp / "clavisd.log").open("ab") as log:
            self.proc = subprocess.Popen([str(exe), "--config", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError((self.tmp / "clavisd.log").read_text())
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("clavisd did not answer /health within 60 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def sample_times(self, host: str) -> list[float]:
        with sqlite3.connect(self.tmp / "clavis.db") as db:
            rows = db.execute("SELECT ts FROM host_samples WHERE host = ? ORDER BY ts", (host,))
            return [float(ts) for (ts,) in rows]

    def stored_reports(self, host: str) -> int:
        with sqlite3.connect(self.tmp / "clavis.db") as db:
            (n,) = db.execute(
                "SELECT count(*) FROM host_samples WHERE host = ?", (host,)
            ).fetchone()
        return int(n)
