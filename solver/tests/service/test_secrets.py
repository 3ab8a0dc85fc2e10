"""The keys: clavisd (and `clavis repack`) refuse a key file that group or others may
use, or, when run as root, one that root does not own; and no key ever reaches clavisd's
log, at debug level, through a run of signed requests both ways."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .helpers import KEYS, PASSWORDS, SECRET, contention_reports, report, signed, write_setup
from .process import Daemon, free_port, wait_for
from .protocol_recorder import ProtocolRecorder

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _forms(secret: bytes) -> list[str]:
    """The ways a secret could be written out: as text, in hex, in base64."""
    return [secret.decode(), secret.hex(), base64.b64encode(secret).decode()]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


# Each private file, what its refusal calls it, and the commands that read it.
_FILES = [("agent-keys.toml", "key file", ["clavisd", "repack"])]


def _argv(which: str, cfg: Path) -> list[str]:
    if which == "clavisd":
        return [str(BIN / "clavisd"), "--config", str(cfg)]
    return [str(BIN / "clavis"), "repack", "--config", str(cfg)]


@pytest.mark.parametrize(("name", "what", "readers"), _FILES)
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o660, 0o644, 0o701])
def test_a_secret_file_open_to_group_or_others_is_refused(
    tmp_path: Path, mode: int, name: str, what: str, readers: list[str]
) -> None:
    cfg = write_setup(tmp_path, port=free_port())
    secret = tmp_path / name
    secret.chmod(mode)
    for which in readers:
        done = _run(*_argv(which, cfg))
        assert done.returncode == 2, (which, done.stdout, done.stderr)
        assert f"{secret}: the {what} must be readable by its owner only (chmod 600)" \
            in done.stderr and f"its mode is {mode:04o}" in done.stderr  # fmt: skip
        assert not any(f in done.stdout + done.stderr for f in _all_forms())
    assert not (tmp_path / "clavis.db").exists(), "clavisd stopped before opening its store"


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner rule applies when root reads it")
@pytest.mark.parametrize(("name", "what", "readers"), _FILES)
def test_as_root_a_secret_file_root_does_not_own_is_refused(
    tmp_path: Path, name: str, what: str, readers: list[str]
) -> None:
    cfg = write_setup(tmp_path, port=free_port())
    secret = tmp_path / name
    os.chown(secret, 65534, 65534)  # nobody: it could chmod or rewrite root's secret
    assert secret.stat().st_mode & 0o777 == 0o600
    for which in readers:
        done = _run(*_argv(which, cfg))
        assert done.returncode == 2, (which, done.stdout, done.stderr)
        assert f"{secret}: the {what} must be owned by root (chown root), not uid " \
            "65534" in done.stderr  # fmt: skip
        assert not any(f in done.stdout + done.stderr for f in _all_forms())
    os.chown(secret, 0, 0)  # root's again: accepted, so `clavis repack` goes on to ask
    again = _run(str(BIN / "clavis"), "repack", "--config", str(cfg), "--timeout", "2")
    assert again.returncode == 2 and "did not answer" in again.stderr, again.stderr


def _all_forms() -> list[str]:
    return [
        f for secret in (SECRET, *(v[1].encode() for v in KEYS.values())) for f in _forms(secret)
    ]


@pytest.fixture
def recorder() -> Iterator[ProtocolRecorder]:
    with ProtocolRecorder(delay_s=0.5) as a:
        yield a


def test_the_secret_never_reaches_the_log(tmp_path: Path, recorder: ProtocolRecorder) -> None:
    port = free_port()
    extra = ("[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\npoll_s = 0.2\n"
             f'[migrator]\naddress = "127.0.0.1:{recorder.port}"\ntimeout_s = 2\n')  # fmt: skip
    cfg = write_setup(tmp_path, extra=extra, port=port)
    log = tmp_path / "clavisd.log"
    d = Daemon(cfg, port, log)
    d.start(args=["--log-level", "debug"])
    try:
        # Signed reports, accepted; one with a forged signature and one replayed, refused.
        for doc in contention_reports(age=20):
            d.call("POST", "/api/v1/reports", doc)
        path = "/api/v1/reports"
        body = json.dumps(report("h3", [], busy=0)).encode()
        headers = signed(path, body, by="h3")
        forged = {**headers, "X-Clavis-Signature": "0" * 64}
        assert httpx.post(d.url + path, content=body, headers=forged).status_code == 401
        assert httpx.post(d.url + path, content=body, headers=headers).status_code == 202
        assert httpx.post(d.url + path, content=body, headers=headers).status_code == 401
        # A wrong password and a right one.
        login = d.url + "/api/v1/login"
        assert httpx.post(login, json={"user": "ada", "password": "wrong"}).status_code == 401
        assert httpx.post(login, json={"user": "ada", "password": PASSWORDS["ada"]}) \
            .status_code == 200  # fmt: skip
        # `clavis repack --apply` (signed by root) and a plan that clavisd runs through the
        # recorder with signed requests of its own.
        done = _run(str(BIN / "clavis"), "repack", "--apply", "--config", str(cfg))
        assert done.returncode == 0, done.stderr
        plan = d.call("GET", "/api/v1/plans")[-1]["id"]
        wait_for(lambda: d.call("GET", f"/api/v1/plans/{plan}")["state"] == "done", 60,
                 "the plan to finish")  # fmt: skip
    finally:
        d.stop()
    text = log.read_text()
    # The run was logged, at debug level, including the calls clavisd signed.
    assert " DEBUG " in text and "/api/v1/steps" in text
    assert not recorder.record.refused and recorder.record.accepted
    for form in _all_forms():
        assert form not in text
    for password in PASSWORDS.values():
        assert password not in text
