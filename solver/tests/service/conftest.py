"""A clavisd in-process (store on disk, real ingest thread) behind FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd

from .helpers import SECRET, write_setup


@pytest.fixture
def clavisd(tmp_path: Path) -> Iterator[Clavisd]:
    extra = "[repack]\ninterval_s = 0\ntime_limit_s = 5\nworkers = 1\nparallelism = 1\n" \
        '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 1\n'  # fmt: skip
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)), SECRET)
    d.ingestor.start()
    yield d
    d.stop()


@pytest.fixture
def client(clavisd: Clavisd) -> Iterator[TestClient]:
    with TestClient(serve(clavisd)) as c:
        yield c
