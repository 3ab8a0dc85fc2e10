"""UI sessions end on logout, and when their user is removed, demoted or given a new
password; with the user unchanged they survive a restart of clavisd (docs/clavisd.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.auth import hash_password
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

from .helpers import login, write_setup

_THREAD = '[ingest]\nwriter = "thread"\n[repack]\ninterval_s = 0\n'


@contextmanager
def running(cfg: Path) -> Iterator[TestClient]:
    d = Clavisd(load_config(cfg))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as c:
            yield c
    finally:
        d.stop()


def test_logout_ends_the_session_and_only_that_one(tmp_path: Path) -> None:
    with running(write_setup(tmp_path, extra=_THREAD)) as c:
        first, second = login(c, "vic"), login(c, "vic")
        assert c.get("/api/v1/hosts", headers=first).status_code == 200
        assert c.post("/api/v1/logout", headers=first).status_code == 204
        r = c.get("/api/v1/hosts", headers=first)
        assert r.status_code == 401 and "session" in r.json()["detail"]
        assert c.post("/api/v1/logout", headers=first).status_code == 401
        assert c.get("/api/v1/hosts", headers=second).status_code == 200
        assert c.post("/api/v1/logout").status_code == 401


def _remove_vic(text: str) -> str:
    return re.sub(r'\[\[users\]\]\nname = "vic"\n[^\n]*\n[^\n]*\n', "", text)


def _demote_ada(text: str) -> str:
    return text.replace('name = "ada"\nrole = "admin"', 'name = "ada"\nrole = "viewer"')


def _new_password_for_vic(text: str) -> str:
    return re.sub(
        r'(name = "vic"\nrole = "viewer"\npassword_scrypt = )"[^"]*"',
        lambda m: f'{m.group(1)}"{hash_password("another-pass")}"',
        text,
    )


@pytest.mark.parametrize(
    ("edit", "user", "path"),
    [
        (_remove_vic, "vic", "/api/v1/hosts"),
        (_new_password_for_vic, "vic", "/api/v1/hosts"),
        (_demote_ada, "ada", "/api/v1/hosts"),
    ],
)
def test_a_changed_user_loses_their_sessions_across_a_restart(
    tmp_path: Path, edit: Callable[[str], str], user: str, path: str
) -> None:
    cfg = write_setup(tmp_path, extra=_THREAD)
    with running(cfg) as c:
        kept, changed = login(c, "ada" if user == "vic" else "vic"), login(c, user)
    before = cfg.read_text()
    cfg.write_text(edit(before))
    assert cfg.read_text() != before  # the edit applied
    with running(cfg) as c:
        r = c.get(path, headers=changed)
        assert r.status_code == 401, r.text
        assert "revoked" in r.json()["detail"]
        assert c.get(path, headers=kept).status_code == 200


def test_a_demoted_admin_cannot_act_as_admin_even_while_logged_in(tmp_path: Path) -> None:
    cfg = write_setup(tmp_path, extra=_THREAD)
    with running(cfg) as c:
        ada = login(c, "ada")
        assert c.post("/api/v1/repack", json={"apply": False}, headers=ada).status_code == 200
    cfg.write_text(_demote_ada(cfg.read_text()))
    with running(cfg) as c:
        r = c.post("/api/v1/repack", json={"apply": False}, headers=ada)
        assert r.status_code == 401, r.text
        # logging in again gives what the config now says
        again = login(c, "ada")
        assert c.post("/api/v1/repack", json={"apply": False}, headers=again).status_code == 403


def test_an_unchanged_user_keeps_the_session_across_a_restart(tmp_path: Path) -> None:
    cfg = write_setup(tmp_path, extra=_THREAD)
    with running(cfg) as c:
        ada = login(c, "ada")
    with running(cfg) as c:
        assert c.get("/api/v1/hosts", headers=ada).status_code == 200
