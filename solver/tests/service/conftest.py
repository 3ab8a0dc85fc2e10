"""clavisd fixtures: each store test runs on SQLite and on PostgreSQL (a private cluster
this test session starts and stops, tests/service/pg.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

from .helpers import write_setup
from .pg import PrivatePostgres

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: SQLite in the test's directory, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'clavis.db'}"
    pg: PrivatePostgres = request.getfixturevalue("postgres")
    return pg.new_database()


@pytest.fixture
def clavisd(tmp_path: Path, store_url: str) -> Iterator[Clavisd]:
    """A clavisd in-process (real ingest writer) on a fresh store."""
    extra = "[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\nparallelism = 1\n" \
        '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 1\n'  # fmt: skip
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra, store_url=store_url)))
    d.ingestor.start()
    yield d
    d.stop()


@pytest.fixture
def client(clavisd: Clavisd) -> Iterator[TestClient]:
    with TestClient(serve(clavisd)) as c:
        yield c
