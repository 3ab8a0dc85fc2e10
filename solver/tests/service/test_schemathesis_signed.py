"""Schemathesis over clavisd's whole OpenAPI document with data that fits the schema
(issue 15, Acceptance): every operation called as a logged-in admin and, through a
signing hook, signed with the admin key (root on the head node); the agents' report
endpoint signed with the key of the host the report names. No server error anywhere.

The negative half (bodies that break the schema) is test_schemathesis_negative.py.

The signing hook serialises a case's body itself and signs those bytes, the path as the
server reads it (percent-decoded) and the method, so the signature covers exactly what
is sent. A report's host and timestamp are generated freely in half the cases (nearly
all refused: unknown host, too old) and set in the other half to one of the cluster's
hosts and a moment ago, so generated reports also pass the contract and reach the
writer: there they must be stored or refused with a 4xx, never a 5xx."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from clavis.service.front_runs import FrontRunner

from .helpers import ADMIN, contended, login, send_signed_case, worked_front
from .schemathesis_app import schema_and_client

EXAMPLES = 15
REPORTS = "/api/v1/reports"
LOGIN = "/api/v1/login"
LOGOUT = "/api/v1/logout"
HOSTS = ("h1", "h2", "h3", "h4")
Api = tuple[schemathesis.BaseSchema, TestClient, FrontRunner]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with schema_and_client(tmp_path) as got:
        yield got


def body_bytes(case: schemathesis.Case) -> bytes:
    """The bytes a case sends as its body: b"" without one, JSON otherwise."""
    if case.body is None or type(case.body).__name__ == "NotSet":
        return b""
    return json.dumps(case.body).encode()


def seed(client: TestClient, admin: dict[str, str]) -> dict[str, str]:
    """Something behind every path parameter: reports of two contended hosts, a stored
    plan, a stored front and a finished front run; their ids, and a host's name."""
    contended(client)
    r = client.post("/api/v1/repack", json={"apply": True}, headers=admin)
    assert r.status_code == 200 and r.json()["plan"] is not None, r.text
    front = client.post("/api/v1/fronts", json=worked_front(), headers=admin)
    assert front.status_code == 200, front.text
    small = {"population": 8, "generations": 2, "seed_time": 0, "seed": 1}
    run = client.post("/api/v1/front-runs", json=small, headers=admin)
    assert run.status_code == 202, run.text
    deadline = time.monotonic() + 60
    while client.get(f"/api/v1/front-runs/{run.json()['id']}", headers=admin).json()["state"] \
            == "running":  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return {"plan_id": str(r.json()["plan"]["id"]), "front_id": str(front.json()["id"]),
            "run_id": str(run.json()["id"]), "host": "h1"}  # fmt: skip


def as_of_now(doc: Any, host: str) -> Any:
    """A generated report made to name one of the cluster's hosts and a moment ago, and
    to keep the two rules between fields the OpenAPI schema cannot state (no watts from
    source "none", no intensity from source "unsupported"), so it reaches the writer."""
    if not isinstance(doc, dict):
        return doc
    now = dt.datetime.fromtimestamp(time.time() - 1, dt.UTC).isoformat()
    out = {**doc, "host": host, "timestamp": now}
    power = out.get("power")
    if isinstance(power, dict) and (power.get("source") == "none" or power.get("watts") is None):
        out["power"] = {**power, "watts": None, "source": "none"}
    if isinstance(out.get("containers"), list):
        out["containers"] = [_consistent(c) for c in out["containers"]]
    return out


def _consistent(c: Any) -> Any:
    if not isinstance(c, dict):
        return c
    unsupported = c.get("intensity_source") == "unsupported"
    if unsupported or c.get("intensity_mpki") is None:
        return {**c, "intensity_mpki": None, "intensity_source": "unsupported"}
    return c


def test_every_operation_signed_or_logged_in_never_gets_a_server_error(api: Api) -> None:
    schema, client, runner = api
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 30
    # /login last: its generated failures reach the login rate limit, which would refuse
    # the logins that follow a generated /logout
    operations.sort(key=lambda op: op.path == LOGIN)
    admin = login(client, "ada")
    ids = seed(client, admin)
    server_errors: list[str] = []
    calls = {"report": 0, "report-stored": 0, "bearer": 0, "signed": 0}

    def note(case: schemathesis.Case, how: str, r: Any, body: bytes = b"") -> None:
        if r.status_code >= 500:
            server_errors.append(f"{how} {case.method} {case.formatted_path} "
                                 f"{body[:160]!r}: {r.status_code} {r.text[:200]}")  # fmt: skip

    for op in operations:
        strategy = op.as_strategy(generation_mode=GenerationMode.POSITIVE)
        if op.path == REPORTS:

            @given(case=strategy, host=st.sampled_from(HOSTS), fix=st.booleans())
            @settings(max_examples=EXAMPLES * 8, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            def run_report(case: schemathesis.Case, host: str, fix: bool) -> None:
                if fix:
                    case.body = as_of_now(case.body, host)
                body = body_bytes(case)
                by = case.body.get("host") if isinstance(case.body, dict) else None
                r = send_signed_case(client, case, body, by if by in HOSTS else "h1")
                calls["report"] += 1
                calls["report-stored"] += r.status_code == 202
                note(case, "signed by its host", r, body)

            run_report()
            continue

        @given(case=strategy, signed_by_admin=st.booleans(), known=st.booleans())
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def run(case: schemathesis.Case, signed_by_admin: bool, known: bool) -> None:
            nonlocal admin
            if known and case.path_parameters:  # half the time: a plan, front, run that exist
                case.path_parameters = {k: ids.get(k, v) for k, v in case.path_parameters.items()}
            if signed_by_admin:
                body = body_bytes(case)
                r = send_signed_case(client, case, body, ADMIN)
                calls["signed"] += 1
                note(case, "signed by the admin key", r, body)
            else:
                r = case.call(headers=admin)
                calls["bearer"] += 1
                note(case, "as admin", r)
                if case.path == LOGOUT and r.status_code == 204:
                    admin = login(client, "ada")
            current = runner.current()
            if current is not None:  # a generated run would search for minutes
                runner.cancel(current.id)
                assert runner.wait_idle(30)

        run()
    assert server_errors == []
    assert calls["bearer"] >= 100 and calls["signed"] >= 100
    assert calls["report"] >= EXAMPLES * 4 and calls["report-stored"] >= 1, calls
