"""Per-host agent keys (issue 15 item 5): a host's key reports for that host only, no agent
key reaches an admin endpoint, keys rotate without a restart, key files stay private."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.daemon import Clavisd
from clavis_contracts.keys import KeyFileError, load_keys, own_key, parse_keys
from clavis_contracts.signing import sign

from .helpers import ADMIN, KEYS, SECRET, container, key_toml, report, signed, write_keys

REPORTS = "/api/v1/reports"


def _post(client: TestClient, doc: dict[str, object], by: str) -> tuple[int, str]:
    body = json.dumps(doc).encode()
    r = client.post(REPORTS, content=body, headers=signed(REPORTS, body, by=by))
    return r.status_code, r.json().get("detail", "")


def _signed_as(
    kid: str, secret: str, path: str, body: bytes, method: str = "POST"
) -> dict[str, str]:
    return {**sign(secret.encode(), method, path, body, time.time(), key_id=kid),
            "Content-Type": "application/json"}  # fmt: skip


def test_a_host_key_reports_for_its_own_host_only(client: TestClient, clavisd: Clavisd) -> None:
    status, detail = _post(client, report("h2", [container("c1")]), by="h1")
    assert status == 403 and "h1-k1" in detail and "'h2'" in detail, detail
    assert _post(client, report("h1", [container("c1")]), by="h1")[0] == 202
    # The admin key is no agent key: it reports for nobody.
    status, detail = _post(client, report("h1", [container("c1")]), by=ADMIN)
    assert status == 403, detail
    assert clavisd.ingestor.stored == 1


def test_agent_keys_never_reach_admin_endpoints(client: TestClient) -> None:
    calls = [
        ("POST", "/api/v1/repack", b'{"apply": true}'),
        ("POST", "/api/v1/plans/1/apply", b""),
        ("POST", "/api/v1/weights", b"{}"),
        ("POST", "/api/v1/power-models/fit", b""),
        ("GET", "/api/v1/hosts", b""),
        ("GET", "/api/v1/plans", b""),
    ]
    for method, path, body in calls:
        r = client.request(method, path, content=body, headers=signed(path, body, method, by="h1"))
        assert r.status_code == 403, (path, r.text)
        assert "agent key" in r.json()["detail"]
    # The admin key does reach them.
    path = "/api/v1/plans"
    assert client.get(path, headers=signed(path, b"", "GET")).status_code == 200


def test_the_migrators_shared_secret_opens_nothing(client: TestClient) -> None:
    body = json.dumps(report("h1", [])).encode()
    r = client.post(REPORTS, content=body, headers=sign(SECRET, "POST", REPORTS, body, time.time()))
    assert r.status_code == 401 and "X-Clavis-Key-Id" in r.json()["detail"]
    path = "/api/v1/repack"
    r = client.post(path, content=b"{}", headers=sign(SECRET, "POST", path, b"{}", time.time()))
    assert r.status_code == 401


def test_a_swapped_key_id_breaks_the_signature(client: TestClient) -> None:
    body = json.dumps(report("h2", [])).encode()
    h = signed(REPORTS, body, by="h1")
    h["X-Clavis-Key-Id"] = "h2-k1"  # claim h2's key with h1's signature
    r = client.post(REPORTS, content=body, headers=h)
    assert r.status_code == 401 and "does not match" in r.json()["detail"]


def _until(cond: object, limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_a_key_rolls_over_without_a_restart(client: TestClient, clavisd: Clavisd) -> None:
    keys_file = clavisd.config.security.agent_keys_file
    old_secret = KEYS["h1-k1"][1]
    new = ("h1-k2", "h1-new-key-0123456789abcdef")
    t = [time.time() - 60]

    def send(kid: str, secret: str) -> int:
        t[0] += 1
        body = json.dumps(report("h1", [container("c1")], ts=t[0])).encode()
        return client.post(REPORTS, content=body,
                           headers=_signed_as(kid, secret, REPORTS, body)).status_code  # fmt: skip

    assert send("h1-k1", old_secret) == 202
    assert send(*new) == 401  # not listed yet
    # 1. both keys listed: both accepted (the host switches whenever it likes)
    write_keys(keys_file, {**KEYS, new[0]: ("h1", new[1])})
    assert _until(lambda: send(*new) == 202), "the added key was not taken up"
    assert send("h1-k1", old_secret) == 202
    # 2. the old key retired: refused, the new one still accepted
    write_keys(
        keys_file, {**{k: v for k, v in KEYS.items() if k != "h1-k1"}, new[0]: ("h1", new[1])}
    )
    assert _until(lambda: send("h1-k1", old_secret) == 401), "the retired key still works"
    assert send(*new) == 202
    # 3. a changed file that is not private is not taken: the keys before it stay
    keys_file.write_text(key_toml(KEYS))
    keys_file.chmod(0o644)
    time.sleep(1.5)
    assert send(*new) == 202 and send("h1-k1", old_secret) == 401


def test_clavisd_refuses_a_keys_file_others_can_read(tmp_path: Path, clavisd: Clavisd) -> None:
    keys_file = clavisd.config.security.agent_keys_file
    keys_file.chmod(0o604)
    with pytest.raises(KeyFileError, match=r"readable by its owner only \(chmod 600\)"):
        Clavisd(clavisd.config)


def test_key_files_are_checked_and_never_echo_a_secret(tmp_path: Path) -> None:
    secret = "a-secret-0123456789abcdef"
    one = f'[[keys]]\nid = "a"\nhost = "h1"\nsecret = "{secret}"\n'
    bad = [
        (f'[[keys]]\nid = "a"\nsecret = "{secret}"\n', "names its host"),
        ('[[keys]]\nid = "a"\nhost = "h1"\nsecret = "short"\n', "at least 16"),
        (one.replace('"a"', '"a b"'), "pattern"),
        (one * 2, "used twice"),
        (one + f'[[keys]]\nid = "b"\nrole = "admin"\nsecret = "{secret}"\n', "share a secret"),
        (one + "extra = 1\n", "extra"),
        ("keys = []\n", "at least 1"),
    ]
    for text, words in bad:
        with pytest.raises(KeyFileError) as err:
            parse_keys(text.encode(), "k.toml")
        assert words in str(err.value), (text, err.value)
        assert secret not in str(err.value) and "short" not in str(err.value)
    f = write_keys(tmp_path / "k.toml", {"x1": ("h2", secret), "a1": (ADMIN, secret[::-1])})
    assert [k.id for k in load_keys(f)] == ["x1", "a1"]
    assert own_key(f, "h2").id == "x1" and secret not in repr(own_key(f, "h2"))
    with pytest.raises(KeyFileError, match="not this host 'h3'"):
        own_key(f, "h3")
    if os.geteuid() == 0:
        os.chown(f, 65534, 65534)
        with pytest.raises(KeyFileError, match="owned by root"):
            load_keys(f)
