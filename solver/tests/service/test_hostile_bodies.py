"""Every route of clavisd's API with malformed bodies (issue 15, items 7 and 8): NaN,
Infinity, 1e999, wrong types, broken JSON, as an admin, unauthenticated and (for the
report) signed. Always a 4xx (or the route's success where the body is ignored), never a
5xx; the answer and the log never carry a password or the raw body."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

from .helpers import login, signed, write_setup

SECRET_WORD = "hunter2-correct-horse-battery"  # sent as a password: must never come back

BODIES: list[bytes] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"{not json",
    b"",
    b"[]",
    b"null",
    b'"x"',
    b"\xff\xfe\x00",
    b'{"apply": NaN}',
    b'{"apply": "true"}',
    b'{"apply": 1}',
    b'{"picks": [1e999, 1, 2]}',
    b'{"picks": [NaN, Infinity, -Infinity]}',
    b'{"picks": ["1", "2", "3"]}',
    b'{"picks": [true, false, true]}',
    b'{"user": NaN, "password": Infinity}',
    b'{"user": "ada", "password": 1e999}',
    b'{"user": "ada", "password": "' + (SECRET_WORD * 100).encode() + b'"}',
    b'{"user": ["ada"], "password": {"' + SECRET_WORD.encode() + b'": 1}}',
    b'{"weights": {"P": NaN, "D": 1, "C": 1, "M": 0}}',
    b'{"host": "h1", "timestamp": 1e999, "interval_s": NaN}',
    b'{"cluster": {"hosts": [{"cores": 1e999}]}}',
    b"[" * 5000 + b"]" * 5000,
]


@pytest.fixture
def app_and_admin(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    extra = "[repack]\ninterval_s = 0\ntime_limit_s = 1\nworkers = 1\n" \
        '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 0.5\n'  # fmt: skip
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)))
    d.ingestor.start()
    with TestClient(serve(d), raise_server_exceptions=False) as c:
        yield c, login(c, "ada")
    d.stop()


def _routes(client: TestClient) -> list[tuple[str, str]]:
    """Every operation of the OpenAPI document, path parameters filled in."""
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    out = []
    for path, ops in paths.items():
        filled = path.replace("{plan_id}", "1").replace("{front_id}", "1")
        out.extend((method.upper(), filled) for method in ops)
    return out


def test_no_route_answers_a_malformed_body_with_a_server_error(
    app_and_admin: tuple[TestClient, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    client, admin = app_and_admin
    routes = _routes(client)
    assert ("POST", "/api/v1/login") in routes and ("POST", "/api/v1/repack") in routes
    assert len(routes) >= 15
    errors = []
    with caplog.at_level(logging.DEBUG):
        for method, path in routes:
            for body in BODIES:
                for auth in ({}, admin, signed(path, body, method=method)):
                    headers = {"Content-Type": "application/json", **auth}
                    r = client.request(method, path, content=body, headers=headers)
                    # Only the sender of a body it could sign or post as admin may
                    # see a short quote of it in a refusal, never the whole of it.
                    echo = SECRET_WORD if not auth else SECRET_WORD * 2
                    if r.status_code >= 500 or echo in r.text:
                        errors.append((method, path, body[:60], r.status_code, r.text[:200]))
    assert errors == [], "\n".join(map(str, errors))
    assert SECRET_WORD not in caplog.text
    assert "Traceback" not in caplog.text


def test_login_with_nan_or_an_over_long_password_is_a_4xx_that_echoes_nothing(
    app_and_admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = app_and_admin
    for body, words in (
        (b'{"user": NaN, "password": "x"}', "user: Input should be a valid string"),
        (b'{"user": "ada", "password": Infinity}', "password: Input should be a valid string"),
        (b'{"user": "ada", "password": "' + (SECRET_WORD * 100).encode() + b'"}',
         "password: String should have at most 1024 characters"),
        (b'{"user": "ada", "password": 1}', "password: Input should be a valid string"),
    ):  # fmt: skip
        r = client.post("/api/v1/login", content=body,
                        headers={"Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 422, r.text
        assert r.json() == {"detail": f"malformed request: {words}"}
    r = client.post("/api/v1/repack", content=b'{"apply": "true"}',
                    headers={"Content-Type": "application/json", **_})  # fmt: skip
    assert r.status_code == 422 and "apply: Input should be a valid boolean" in r.text
