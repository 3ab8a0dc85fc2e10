"""Schemathesis' negative mode over clavisd's whole OpenAPI document (issue 15): bodies,
paths and queries that break the schema on purpose, sent as a logged-in admin or signed
with the admin key, and for the agents' report endpoint signed with a host's key (a
signing hook: the body is serialised here so its signature covers the exact bytes sent).
No server error anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from .helpers import ADMIN, login, send_signed_case, signed
from .schemathesis_app import schema_and_client

EXAMPLES = 12
REPORTS = "/api/v1/reports"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[schemathesis.BaseSchema, TestClient, dict[str, str]]]:
    with schema_and_client(tmp_path) as (schema, client, _):
        yield schema, client, login(client, "ada")


def _body_bytes(body: Any) -> bytes:
    """The exact bytes to sign and send: raw bodies as they are, anything else as JSON
    (NaN and infinities included on purpose: what a careless or hostile agent sends)."""
    if body is None or type(body).__name__ == "NotSet":  # an operation without a body
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8", "surrogatepass")
    return json.dumps(body, allow_nan=True, default=repr).encode("utf-8", "surrogatepass")


def test_negative_data_never_gets_a_server_error(
    api: tuple[schemathesis.BaseSchema, TestClient, dict[str, str]],
) -> None:
    schema, client, admin = api
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 12
    server_errors: list[str] = []
    signed_sent = negative = 0

    for op in operations:
        if op.path == REPORTS:

            @given(case=op.as_strategy(generation_mode=GenerationMode.NEGATIVE))
            @settings(max_examples=EXAMPLES * 3, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            def run_signed(case: schemathesis.Case) -> None:
                nonlocal signed_sent
                body = _body_bytes(case.body)
                r = client.post(REPORTS, content=body, headers=signed(REPORTS, body))
                signed_sent += 1
                if r.status_code >= 500:
                    server_errors.append(f"POST {REPORTS} {body[:120]!r}: {r.status_code}")

            run_signed()
            continue

        @given(case=op.as_strategy(generation_mode=GenerationMode.NEGATIVE),
               signed_by_admin=st.booleans())  # fmt: skip
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def run(case: schemathesis.Case, signed_by_admin: bool) -> None:
            if signed_by_admin:
                r = send_signed_case(client, case, _body_bytes(case.body), ADMIN)
            else:
                r = case.call(headers=admin)
                case.validate_response(r, checks=[not_a_server_error])
            if r.status_code >= 500:
                server_errors.append(f"{case.method} {case.formatted_path}: {r.status_code}")

        try:
            run()
        except Unsatisfiable:  # nothing in it can be made invalid (e.g. a GET without input)
            continue
        negative += 1
    assert server_errors == []
    assert signed_sent >= 1 and negative >= 6
