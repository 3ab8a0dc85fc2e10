"""The clavisd both schemathesis tests call: in-process, no repack loop, a one-second
solver, and agents at a closed port (a plan's apply fails fast), behind the same limits
and report fast path as the real server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import schemathesis
from fastapi.testclient import TestClient

from clavis.service.api import serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis.service.front_runs import FrontRunner

from .helpers import write_setup

EXTRA = ("[repack]\ninterval_s = 0\ntime_limit_s = 1\nworkers = 1\n"
         '[migrator]\naddress = "127.0.0.1:9"\ntimeout_s = 0.5\n')  # fmt: skip


@contextmanager
def schema_and_client(
    tmp: Path,
) -> Iterator[tuple[schemathesis.BaseSchema, TestClient, FrontRunner]]:
    """The OpenAPI schema schemathesis generates from, a client, and the front runner."""
    d = Clavisd(load_config(write_setup(tmp, extra=EXTRA)))
    d.ingestor.start()
    app = serve(d)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            runner = app.app.app.state.front_runner  # under the limits and the fast path
            yield schemathesis.openapi.from_asgi("/api/v1/openapi.json", app), client, runner
    finally:
        d.stop()
