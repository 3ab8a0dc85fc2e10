"""Slurm power saving through a real clavisd (slurmpower_api.py): the resume request's
schema versions and job nodes, refused garbage, and the power key role, which reaches
/nodes/suspend and /nodes/resume and nothing else (docs/clavisd.md, Security). The
node command is a script that records its calls (the testbed's real one runs in
tests/integration/test_power.py)."""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clavis.service.api import create_app, serve
from clavis.service.config import load_config
from clavis.service.daemon import Clavisd
from clavis_contracts.keys import KeyFileError, own_key, parse_keys

from .helpers import (
    ADMIN,
    KEYS,
    POWER,
    container,
    key_toml,
    login,
    post_report,
    report,
    signed,
    write_setup,
)
from .process import Daemon, free_port
from .test_slurmpower import _program

RESUME = "/api/v1/nodes/resume"
SUSPEND = "/api/v1/nodes/suspend"
POWER_ROUTES = {("POST", RESUME), ("POST", SUSPEND)}
LOGOUT = "/api/v1/logout"
# reachable without credentials by design: liveness, login, Prometheus, the schema
PUBLIC = {("GET", "/api/v1/health"), ("POST", "/api/v1/login"), ("GET", "/metrics"),
          ("GET", "/api/v1/openapi.json")}  # fmt: skip


class Power:
    def __init__(self, d: Clavisd, client: TestClient, calls: Path) -> None:
        self.d, self.client, self.calls = d, client, calls

    def post(self, path: str, doc: object, by: str = POWER) -> Any:
        body = json.dumps(doc).encode()
        return self.client.post(path, content=body, headers=signed(path, body, by=by))

    def started(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def power(tmp_path: Path) -> Iterator[Power]:
    """A clavisd with Slurm power saving (no host power: every host is on) on SQLite."""
    calls = tmp_path / "calls"
    exe = tmp_path / "node-command"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    extra = ('[ingest]\nwriter = "thread"\n[repack]\ninterval_s = 0\n'
             f'[slurm_power]\nenabled = true\nnode_command = ["{exe}"]\n')  # fmt: skip
    d = Clavisd(load_config(write_setup(tmp_path, extra=extra)))
    d.ingestor.start()
    try:
        with TestClient(serve(d)) as client:
            yield Power(d, client, calls)
    finally:
        d.stop()


def _until_stored(p: Power, hosts: int) -> None:
    for _ in range(100):  # the ingest writer stores within a few hundred ms
        r = p.client.get("/api/v1/hosts", headers=signed("/api/v1/hosts", b"", "GET"))
        if sum(1 for h in r.json() if h.get("last_report")) >= hosts:
            return
        time.sleep(0.05)
    raise AssertionError("reports not stored")


def _node(name: str, cores: int = 2) -> dict[str, object]:
    return {"name": name, "cores": cores, "memory_bytes": 2**30}


def test_a_resume_places_the_node_near_its_jobs_running_node(power: Power) -> None:
    # x (up, allocated to the job) fills h2 in rack r0; h1 (r1) and h4 (r0) have the same
    # load; h3 never reported, so it takes nothing
    for host, name, cores in (("h2", "x", 8), ("h1", "y", 4), ("h4", "z", 4)):
        r = post_report(power.client, report(host, [container(name, job=None, cores=cores)]))
        assert r.status_code == 202, r.text
    _until_stored(power, 3)
    alone = power.post(RESUME, {"nodes": [_node("b")]})
    assert alone.status_code == 200, alone.text
    assert [(n["node"], n["host"], n["ok"]) for n in alone.json()["results"]] == [("b", "h1", True)]
    near = power.post(RESUME, {"schema_version": 2, "nodes": [_node("a")], "job_nodes": ["x"]})
    assert near.status_code == 200, near.text
    assert [(n["node"], n["host"], n["ok"]) for n in near.json()["results"]] == [("a", "h4", True)]
    assert power.started() == ["start b h1", "start a h4"]


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"nodes": [_node("a")], "job_nodes": ["x"]}, "job_nodes needs schema_version 2"),
        ({"schema_version": 3, "nodes": [_node("a")]}, "schema_version"),
        ({"schema_version": "2", "nodes": [_node("a")], "job_nodes": []}, "schema_version"),
        ({"schema_version": 2, "nodes": [_node("a")], "job_nodes": ["a"]},
         "job_nodes a are being resumed"),
        ({"schema_version": 2, "nodes": [_node("a")], "job_nodes": ["x", "x"]},
         "job_nodes lists x more than once"),
        ({"schema_version": 2, "nodes": [_node("a"), _node("a")]}, "nodes lists a more than once"),
        ({"schema_version": 2, "nodes": [_node("a")], "job_nodes": ["x;rm"]}, "job_nodes"),
        ({"schema_version": 2, "nodes": [_node("a")], "job_nodes": "x"}, "job_nodes"),
        ({"schema_version": 2, "nodes": [_node("a")], "job_nodes": ["x"] * 4097}, "job_nodes"),
    ],
)  # fmt: skip
def test_garbage_in_a_resume_request_gets_422_naming_it_and_starts_nothing(
    power: Power, doc: dict[str, object], says: str
) -> None:
    r = power.post(RESUME, doc)
    assert r.status_code == 422, r.text
    assert says in json.dumps(r.json()), r.text
    assert power.started() == []


def _every_route(power: Power) -> list[tuple[str, str]]:
    """Every (method, path) of clavisd's API (its OpenAPI document: all but /metrics and
    the UI's files), path parameters filled in."""
    out = []
    for template, ops in create_app(power.d).openapi()["paths"].items():
        path = re.sub(r"\{[a-z_]+\}", "1", template.replace("{host}", "h1"))
        out += [(m.upper(), path) for m in sorted(ops)]
    return out


def test_a_power_key_reaches_the_power_routes_and_nothing_else(
    power: Power, caplog: pytest.LogCaptureFixture
) -> None:
    routes = _every_route(power)
    assert set(routes) >= POWER_ROUTES and len(routes) > 25, routes
    reached = []
    for method, path in routes:
        if (method, path) in PUBLIC | POWER_ROUTES or not path.startswith("/api/"):
            continue
        body = b"" if method == "GET" else b"{}"
        if path.endswith("/reports"):  # a well-formed report, so only the key is wrong
            body = json.dumps(report("h1", [])).encode()
        r = power.client.request(method, path, content=body,
                                 headers=signed(path, body, method, by=POWER))  # fmt: skip
        if path == LOGOUT:  # a session's own: no key of any role ends one
            assert r.status_code == 401, r.text
            continue
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        reached.append(path)
        if path.endswith("/reports"):
            assert "power-k1 (power) may not report" in r.json()["detail"]
        else:
            assert "power-k1 is a power key" in r.json()["detail"], r.text
    assert "/api/v1/repack" in reached and "/api/v1/weights" in reached
    assert "/api/v1/plans" in reached and "/api/v1/reports" in reached
    # and the two it is for (h1 reports: a host on with room)
    assert post_report(power.client, report("h1", [])).status_code == 202
    _until_stored(power, 1)
    assert power.post(SUSPEND, {"nodes": ["n1"]}).status_code == 200
    r = power.post(RESUME, {"nodes": [_node("n2")]})
    assert r.status_code == 200 and r.json()["results"][0]["ok"] is True, r.text
    assert power.started()[0] == "stop n1" and power.started()[1].startswith("start n2 ")
    assert "power-key-0123456789abcdef" not in caplog.text


def test_admin_and_agent_keys_keep_their_rights_on_the_power_routes(power: Power) -> None:
    # the admin key (and an admin's session) still resumes and suspends
    assert post_report(power.client, report("h1", [])).status_code == 202
    _until_stored(power, 1)
    assert power.post(SUSPEND, {"nodes": ["n1"]}, by=ADMIN).status_code == 200
    r = power.client.post(RESUME, json={"nodes": [_node("n2")]}, headers=login(power.client, "ada"))
    assert r.status_code == 200, r.text
    # a viewer, a host's agent key: refused as before
    r = power.client.post(RESUME, json={"nodes": [_node("n3")]}, headers=login(power.client, "vic"))
    assert r.status_code == 403
    r = power.post(SUSPEND, {"nodes": ["n1"]}, by="h1")
    assert r.status_code == 403 and "agent key" in r.json()["detail"]
    assert power.started() == ["stop n1", power.started()[1]]
    assert power.started()[1].startswith("start n2 ")
    # an agent key still reports for its host, the admin key still reaches admin routes
    assert post_report(power.client, report("h2", [])).status_code == 202
    path = "/api/v1/plans"
    assert power.client.get(path, headers=signed(path, b"", "GET", by=ADMIN)).status_code == 200


def test_a_power_key_speaks_for_no_host_and_is_no_agents_key(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="a power key speaks for no host: drop `host`"):
        parse_keys(b'[[keys]]\nid = "p"\nrole = "power"\nhost = "h1"\nsecret = "' + b"s" * 20
                   + b'"\n', "power.toml")  # fmt: skip
    (key,) = parse_keys(b'[[keys]]\nid = "p"\nrole = "power"\nsecret = "' + b"s" * 20 + b'"\n', "k")
    assert str(key) == "key p (power)" and "s" * 20 not in repr(key)
    # a monitor or migrator given the power key refuses it at start
    f = tmp_path / "agent.toml"
    f.write_bytes(b'[[keys]]\nid = "p"\nrole = "power"\nsecret = "' + b"s" * 20 + b'"\n')
    f.chmod(0o600)
    with pytest.raises(KeyFileError, match=r"the first key, p, is for no host \(power\)"):
        own_key(f, "h1")


def test_the_program_waits_for_a_clavisd_that_is_not_listening_yet(tmp_path: Path) -> None:
    """The suspend program against a real clavisd process that starts 2 s after it: the
    refused connections are tried again (Slurm counts the node powered down whatever the
    program says, so a lost suspend leaves its container running)."""
    prog = _program()
    port = free_port()
    exe = tmp_path / "node-command"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n')
    exe.chmod(0o755)
    extra = f'[slurm_power]\nenabled = true\nnode_command = ["{exe}"]\n'
    d = Daemon(write_setup(tmp_path, extra=extra, port=port), port, tmp_path / "clavisd.log")
    key = tmp_path / "power-key.toml"
    key.write_text(key_toml({k: v for k, v in KEYS.items() if v[0] == POWER}))
    key.chmod(0o600)
    cfg = {"url": f"http://127.0.0.1:{port}", "key_file": str(key), "connect_wait_s": 0}
    with pytest.raises(prog.PowerError, match="did not answer /api/v1/nodes/suspend"):
        prog.call(cfg, SUSPEND, {"nodes": ["n1"]})  # no wait: refused at once
    answer: list[object] = []
    caller = threading.Thread(target=lambda: answer.append(
        prog.call({**cfg, "connect_wait_s": 30}, SUSPEND, {"nodes": ["n1"]})))  # fmt: skip
    caller.start()
    try:
        time.sleep(2.0)
        assert caller.is_alive() and not answer  # still trying
        d.start()
        caller.join(timeout=30)
        assert answer == [
            {"results": [{"node": "n1", "host": None, "ok": True, "message": "exit 0"}]}
        ]
        assert (tmp_path / "calls").read_text() == "stop n1\n"
        # a refusal by clavisd is not retried: an agent key gets its 403 at once
        key.write_text(key_toml({"h1-k1": KEYS["h1-k1"]}))
        t0 = time.monotonic()
        with pytest.raises(prog.PowerError, match="clavisd refused /api/v1/nodes/suspend: 403"):
            prog.call({**cfg, "connect_wait_s": 30}, SUSPEND, {"nodes": ["n1"]})
        assert time.monotonic() - t0 < 5
    finally:
        caller.join(timeout=40)
        d.stop()
