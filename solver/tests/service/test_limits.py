"""Bounds on every request (issue 15 item 6): body sizes (413 after at most the limit
read), slow headers and bodies (closed, 408), failed logins (429, Retry-After), and HTTPS
with a certificate made here."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.limits import LoginLimiter
from clavis_contracts.keys import AgentKey
from clavis_monitor.config import ClavisdConfig, SpoolConfig
from clavis_monitor.sender import Sender, Spool

from .helpers import KEYS, PASSWORDS, report, signed, write_setup
from .process import Daemon, free_port

_REST = '[ingest]\nwriter = "thread"\n[repack]\ninterval_s = 0\n'
_BOUNDS = (
    "max_body_bytes = 4096\nlogin_max_bytes = 512\nrequest_timeout_s = 1\nheader_timeout_s = 1\n"
)


def _setup(tmp: Path, port: int = 7780) -> Path:
    """write_setup's config with small bounds in its [server] table."""
    cfg = write_setup(tmp, port=port, extra=_REST)
    head = f"[server]\nport = {port}\n"
    cfg.write_text(cfg.read_text().replace(head, head + _BOUNDS))
    return cfg


@pytest.fixture
def small(tmp_path: Path) -> Iterator[TestClient]:
    d = Clavisd(load_config(_setup(tmp_path)))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as c:
            yield c
    finally:
        d.stop()


def test_every_body_has_a_limit(small: TestClient) -> None:
    # /login: a password of 100 kB is refused before its body is parsed
    r = small.post("/api/v1/login", json={"user": "ada", "password": "x" * 100_000})
    assert r.status_code == 413 and "512 bytes" in r.json()["detail"], r.text
    # a signed admin request over max_body_bytes, declared or streamed (no length)
    body = b"{" + b" " * 10_000 + b"}"
    path = "/api/v1/weights"
    r = small.post(path, content=body, headers=signed(path, body))
    assert r.status_code == 413 and "4096 bytes" in r.json()["detail"], r.text

    def chunks() -> Iterator[bytes]:
        yield from (b" " * 1000 for _ in range(10))

    r = small.post(path, content=chunks(), headers=signed(path, b""))
    assert r.status_code == 413, r.text
    # within the limits, requests go on as before
    r = small.post("/api/v1/login", json={"user": "ada", "password": PASSWORDS["ada"]})
    assert r.status_code == 200


def test_failed_logins_are_rate_limited(small: TestClient) -> None:
    for _ in range(5):
        r = small.post("/api/v1/login", json={"user": "ada", "password": "wrong"})
        assert r.status_code == 401
    r = small.post("/api/v1/login", json={"user": "ada", "password": PASSWORDS["ada"]})
    assert r.status_code == 429, r.text
    wait = int(r.headers["retry-after"])
    assert 0 < wait <= 60 and f"{wait} s" in r.json()["detail"]
    # the address is limited: another user from it waits too
    r = small.post("/api/v1/login", json={"user": "vic", "password": PASSWORDS["vic"]})
    assert r.status_code == 429


def test_the_login_limiter_window_slides() -> None:
    lim = LoginLimiter(max_failures=3, window_s=60)
    who = ("address 10.0.0.1", "user ada")
    for t in (0.0, 10.0, 20.0):
        assert lim.retry_after(who, t) == 0
        lim.failed(who, t)
    assert lim.retry_after(who, 30.0) == 30  # the first failure leaves at 60
    assert lim.retry_after(("address 10.0.0.2", "user vic"), 30.0) == 0
    assert lim.retry_after(("address 10.0.0.2", "user ada"), 30.0) == 30  # the user is limited
    assert lim.retry_after(who, 60.5) == 0
    bounded = LoginLimiter(max_failures=1, window_s=60, max_keys=10)
    for i in range(100):
        bounded.failed((f"address {i}",), float(i))
    assert len(bounded._failed) <= 10


@pytest.fixture
def real(tmp_path: Path) -> Iterator[Daemon]:
    port = free_port()
    d = Daemon(_setup(tmp_path, port), port, tmp_path / "clavisd.log")
    d.start()
    try:
        yield d
    finally:
        d.stop()


def _closed_within(sock: socket.socket, limit_s: float) -> float:
    """Seconds until the server closed ``sock`` (fails past ``limit_s``)."""
    t0 = time.monotonic()
    sock.settimeout(limit_s)
    got = b""
    while True:
        try:
            part = sock.recv(4096)
        except (TimeoutError, ConnectionResetError):
            break
        if not part:
            return time.monotonic() - t0
        got += part
    raise AssertionError(f"still open after {limit_s} s; got {got[:200]!r}")


@pytest.mark.slow
def test_slow_or_partial_requests_are_cut_off(real: Daemon) -> None:
    # headers that never end: the connection is closed after header_timeout_s (1 s)
    with socket.create_connection(("127.0.0.1", real.port)) as s:
        s.sendall(b"POST /api/v1/login HTTP/1.1\r\nHost: x\r\nContent-Ty")
        assert _closed_within(s, 10) < 5
    # nothing at all after connecting: closed too
    with socket.create_connection(("127.0.0.1", real.port)) as s:
        assert _closed_within(s, 10) < 5
    # a body that stops half way: 408 after request_timeout_s (1 s)
    with socket.create_connection(("127.0.0.1", real.port)) as s:
        s.sendall(b"POST /api/v1/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: 100\r\n\r\n{\"user\": ")  # fmt: skip
        s.settimeout(10)
        t0 = time.monotonic()
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - t0 < 5
    # a declared 100 MB body is refused at once, unread
    with socket.create_connection(("127.0.0.1", real.port)) as s:
        s.sendall(b"POST /api/v1/weights HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000"
                  b"\r\nX-Clavis-Key-Id: admin-k1\r\n\r\n")  # fmt: skip
        s.settimeout(10)
        assert s.recv(4096).startswith(b"HTTP/1.1 413")
    # and the server still serves
    assert httpx.get(real.url + "/api/v1/health", timeout=5).status_code == 200


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


@pytest.mark.slow
def test_https_with_a_self_signed_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    tls = f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\n'
    cfg = _setup(tmp_path, port)
    cfg.write_text(cfg.read_text().replace("[server]\n", f"[server]\n{tls}"))
    d = Daemon(cfg, port, tmp_path / "clavisd.log", tls_ca=cert)
    d.start()
    try:
        body = json.dumps(report("h1", [])).encode()
        trust = ssl.create_default_context(cafile=cert)
        r = httpx.post(d.url + "/api/v1/reports", content=body, verify=trust,
                       headers=signed("/api/v1/reports", body, by="h1"), timeout=10)  # fmt: skip
        assert r.status_code == 202, r.text
        # the monitor's sender, trusting the certificate through clavisd.ca_file
        monitor = ClavisdConfig(url=d.url, key_file="", ca_file=str(cert), timeout_s=10)
        h2 = AgentKey(id="h2-k1", host="h2", secret=KEYS["h2-k1"][1])
        sender = Sender(monitor, Spool(SpoolConfig(dir=str(tmp_path / "spool"))), h2)
        sender.submit(json.dumps(report("h2", [])).encode())
        assert sender.stats.sent == 1, sender.stats.last_error
        # an unverified client and plain HTTP get nowhere
        with pytest.raises(httpx.ConnectError):
            httpx.get(d.url + "/api/v1/health", timeout=5)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5)
        # `clavis repack` finds the scheme and the certificate in the config
        done = subprocess.run(
            [str(Path(d.exe).parent / "clavis"), "repack", "--config", str(cfg)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "decision:" in done.stdout
    finally:
        d.stop()
    # a TLS key others can read stops clavisd before it serves
    key.chmod(0o644)
    done = subprocess.run([d.exe, "--config", str(cfg)], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2 and "TLS key must be readable by its owner only" in done.stderr
    assert ssl.PEM_FOOTER not in done.stderr
