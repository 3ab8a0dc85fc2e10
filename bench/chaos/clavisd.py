"""A real clavisd for the chaos bench: its files in a temporary directory, started and
ended by the bench only (by its own PID), and requests to it on 127.0.0.1 signed with
clavis_contracts as the agents and `clavis repack` sign theirs."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from clavis.service.auth import hash_password
from clavis_contracts.keys import AgentKey
from clavis_contracts.signing import sign

ADMIN_KEY = AgentKey(id="chaos-admin", role="admin", secret="chaos-admin-key-0123456789abcdef")
PASSWORDS = {"ada": "ada-password-1", "vic": "vic-password-1"}
HOST_CORES = 8


def host_name(i: int) -> str:
    return f"h{i}"


def host_key(i: int) -> AgentKey:
    return AgentKey(id=f"h{i}-k1", host=host_name(i), secret=f"chaos-key-of-h{i}-0123456789")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_doc(hosts: int) -> dict[str, Any]:
    """Hosts h1..hN of 8 cores (so a front of examples/worked, on h1-h3, fits it)."""
    return {"name": "chaos", "hosts": [
        {"name": host_name(i), "rack": f"r{i % 2}", "cores": HOST_CORES,
         "domains": {"count": 2, "cores_per_domain": HOST_CORES // 2},
         "power": {"idle_w": 100, "peak_w": 180, "off_w": 10}}
        for i in range(1, hosts + 1)
    ]}  # fmt: skip


def users_toml(roles: dict[str, str], passwords: dict[str, str]) -> str:
    return "".join(
        f'[[users]]\nname = "{u}"\nrole = "{roles[u]}"\n'
        f'password_scrypt = "{hash_password(passwords[u])}"\n'
        for u in roles
    )


class Clavisd:
    """One clavisd process with its config, store and log in ``home``."""

    def __init__(self, home: Path, hosts: int, extra: str = "", *, server: str = "",
                 security: str = "") -> None:  # fmt: skip
        """``server``, ``security``: lines for those sections; ``extra``: other sections."""
        self.home, self.hosts, self.port = home, hosts, free_port()
        self.server, self.security = server, security
        self.log = home / "clavisd.log"
        self.db = home / "clavis.db"
        self.proc: subprocess.Popen[bytes] | None = None
        (home / "cluster.yaml").write_text(yaml.safe_dump(cluster_doc(hosts)))
        keys = home / "agent-keys.toml"
        keys.write_text(
            "".join(
                f'[[keys]]\nid = "{k.id}"\nhost = "{k.host}"\nsecret = "{k.secret}"\n'
                for k in (host_key(i) for i in range(1, hosts + 1))
            )
            + f'[[keys]]\nid = "{ADMIN_KEY.id}"\nrole = "admin"\nsecret = "{ADMIN_KEY.secret}"\n'
        )
        keys.chmod(0o600)
        self.extra = extra
        self.users = users_toml({"ada": "admin", "vic": "viewer"}, PASSWORDS)
        self.write_config()

    def write_config(self, extra: str | None = None, users: str | None = None) -> Path:
        """(Re)write the config; takes effect at the next start."""
        self.extra = self.extra if extra is None else extra
        self.users = self.users if users is None else users
        cfg = self.home / "clavis.toml"
        cfg.write_text(
            f'cluster_file = "{self.home / "cluster.yaml"}"\n{self.users}'
            f'[server]\nlisten = "127.0.0.1"\nport = {self.port}\n{self.server}'
            f'[store]\nurl = "sqlite:///{self.db}"\n'
            f'[security]\nagent_keys_file = "{self.home / "agent-keys.toml"}"\n{self.security}'
            f"{self.extra}"
        )
        return cfg

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, limit_s: float = 60.0) -> float:
        """Start and wait for /health; the seconds that took."""
        t0 = time.monotonic()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "clavisd"), "--config",
                 str(self.home / "clavis.toml"), "--log-level", "info"],
                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        deadline = t0 + limit_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"clavisd exited {self.proc.returncode}: {self.tail()}")
            try:
                if httpx.get(self.url + "/api/v1/health", timeout=1).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"clavisd did not answer /health in {limit_s} s")

    def run_to_exit(self, limit_s: float = 60.0) -> int:
        """Start with the current config expecting it to refuse it: its exit code."""
        with self.log.open("ab") as log:
            proc = subprocess.run(
                [str(Path(sys.executable).parent / "clavisd"), "--config",
                 str(self.home / "clavis.toml")],
                stdout=log, stderr=subprocess.STDOUT, timeout=limit_s, check=False)  # fmt: skip
        return proc.returncode

    def tail(self, n: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.pid}/task/{self.pid}/children")
                    .read_text().split()]  # fmt: skip
        except OSError:
            return []

    def kill9(self) -> None:
        """SIGKILL by PID; its writer and advice children end by themselves (EOF)."""
        assert self.proc is not None
        kids = self.children()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        wait_for(lambda: not any(_alive(k) for k in kids), 30, "clavisd's children to exit")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def request(
        self,
        method: str,
        path: str,
        doc: Any = None,
        *,
        key: AgentKey | None = None,
        token: str | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        """A request to /api/v1``path``, signed with ``key``, or with a session ``token``."""
        full = "/api/v1" + path
        body = raw if raw is not None else (b"" if doc is None else json.dumps(doc).encode())
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers |= sign(key.secret_bytes, method, full, body, time.time(), key_id=key.id)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.request(method, self.url + full, content=body, headers=headers, timeout=60)

    def admin(self, method: str, path: str, doc: Any = None) -> httpx.Response:
        return self.request(method, path, doc, key=ADMIN_KEY)

    def report(self, host: int, containers: list[dict[str, Any]], ts: float | None = None,
               key: AgentKey | None = None) -> httpx.Response:  # fmt: skip
        doc = report_doc(host_name(host), containers, time.time() if ts is None else ts)
        return self.request("POST", "/reports", doc, key=key or host_key(host))

    def login(self, user: str, password: str) -> httpx.Response:
        return self.request("POST", "/login", {"user": user, "password": password})

    def query(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.db, timeout=30)
        try:
            return list(db.execute(sql, args).fetchall())
        finally:
            db.close()


def report_doc(host: str, containers: list[dict[str, Any]], ts: float) -> dict[str, Any]:
    return {
        "host": host, "timestamp": dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(),
        "interval_s": 1.0, "busy_cores": 2.0, "power": {"watts": 150.0, "source": "ipmi-dcmi"},
        "containers": containers,
    }  # fmt: skip


def container(name: str, cores: Any = 2, job: str = "j1") -> dict[str, Any]:
    return {"name": name, "job": job, "cores": cores, "memory_bytes": 2**30, "busy_cores": 1.0,
            "intensity_mpki": 1.0, "intensity_source": "recorded", "traffic": []}  # fmt: skip


def wait_for(cond: Callable[[], bool], limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {limit_s} s waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
