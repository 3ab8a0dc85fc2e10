"""A host cannot take another host's containers over by listing them (issue 15 item 5)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from clavis.service.claims import ContainerClaims
from clavis.service.daemon import Clavisd

from .helpers import container, login, post_report, report


def test_a_host_cannot_list_a_container_another_host_still_lists(
    client: TestClient, clavisd: Clavisd
) -> None:
    assert post_report(client, report("h1", [container("c1"), container("c2")])).status_code == 202
    r = post_report(client, report("h2", [container("c1"), container("x")]))
    assert r.status_code == 409, r.text
    assert "'c1' (host 'h1')" in r.json()["detail"]
    view = login(client, "vic")
    hosts = {c["name"]: c["host"] for c in client.get("/api/v1/containers", headers=view).json()}
    assert hosts == {"c1": "h1", "c2": "h1"}  # nothing of h2's report was stored
    # once h1 stops listing c1 (it moved), h2 may report it
    assert post_report(client, report("h1", [container("c2")])).status_code == 202
    assert post_report(client, report("h2", [container("c1")])).status_code == 202
    hosts = {c["name"]: c["host"] for c in client.get("/api/v1/containers", headers=view).json()}
    assert hosts["c1"] == "h2"
    # and now h1 cannot take it back while h2 lists it
    assert post_report(client, report("h1", [container("c1")])).status_code == 409


def test_a_quiet_host_or_a_planned_move_releases_its_containers() -> None:
    claims = ContainerClaims([("c1", "h1")], fresh_s=120)
    never = lambda *_: False  # noqa: E731
    t = 1000.0  # now, and the new report's stamp
    assert claims.taken("h2", ["c1"], t, t, {"h1": 950.0}, moving=never) == [("c1", "h1")]
    assert claims.taken("h2", ["c1"], t, t, {"h1": 870.0}, moving=never) == []  # h1 quiet
    assert claims.taken("h1", ["c1"], t, t, {"h1": 950.0}, moving=never) == []  # its own
    # a late (spooled) report of h2, older than h1's listing, takes nothing over: it passes
    assert claims.taken("h2", ["c1"], 940.0, t, {"h1": 950.0}, moving=never) == []
    claims.record("h2", ["c1"], 940.0, {"h1": 950.0, "h2": 940.0})
    assert claims.taken("h3", ["c1"], t, t, {"h1": 950.0}, moving=never) == [("c1", "h1")]
    moves = {("c1", "h1", "h2")}
    assert claims.taken("h2", ["c1"], t, t, {"h1": 950.0}, moving=lambda *m: m in moves) == []
    assert claims.taken("h3", ["c1"], t, t, {"h1": 950.0}, moving=lambda *m: m in moves) == [
        ("c1", "h1")
    ]
    claims.record("h2", ["c1"], t, {"h1": 950.0})  # the move accepted: h1 no longer holds it
    assert claims.taken("h2", ["c1"], t, t, {"h1": 999.0}, moving=never) == []
    assert claims.taken("h1", ["c1"], t, t, {"h2": 999.0}, moving=never) == [("c1", "h2")]
