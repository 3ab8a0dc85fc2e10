"""Report intake under hostile or mistaken reports (issue 15, items 1, 2 and 8): a report
the cluster cannot hold is refused by name and stores nothing; containers a host stops
listing leave the store; late (spooled) reports are stored without overwriting newer
state; types are strict, so nothing fails later in the writer."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from clavis.service.config import ConfigError, load_config
from clavis.service.daemon import Clavisd
from clavis.service.ingest import Accepted, Ingestor
from clavis.service.store import Store
from clavis_contracts import MonitorReport

from .helpers import container, login, report, signed, store_rows, write_setup


def _send(client: TestClient, doc: object) -> tuple[int, str]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    r = client.post("/api/v1/reports", content=body, headers=signed("/api/v1/reports", body))
    return r.status_code, r.json()["detail"] if r.status_code >= 400 else ""


def _containers(client: TestClient) -> dict[str, str]:
    view = login(client, "vic")
    return {c["name"]: c["host"] for c in client.get("/api/v1/containers", headers=view).json()}


def test_a_report_larger_than_its_host_is_refused_by_name(
    client: TestClient, clavisd: Clavisd, store_url: str
) -> None:
    now = time.time()
    assert _send(client, report("h1", [container("a1", cores=4)], ts=now - 9))[0] == 202
    before = store_rows(store_url)
    for doc, words in (
        (report("h1", [container("huge", cores=65536)], ts=now - 5),
         "container 'huge' has 65536 cores but host 'h1' has 8 (cluster file)"),
        (report("h1", [container("a1", cores=4), container("b1", cores=6)], ts=now - 5),
         "containers of host 'h1' list 10 cores but the host has 8 (cluster file)"),
    ):  # fmt: skip
        status, detail = _send(client, doc)
        assert (status, detail) == (422, words)
    assert store_rows(store_url) == before  # nothing stored, not even the host sample
    # The cluster still plans: the refused container never reached the snapshot.
    admin = login(client, "ada")
    r = client.post("/api/v1/repack", json={"apply": False}, headers=admin)
    assert r.status_code == 200 and r.json()["decision"] != "no-solution", r.text


def test_a_report_whose_container_exceeds_the_hosts_memory_is_refused(
    client: TestClient, store_url: str
) -> None:
    """Report schema 3 carries the host's memory (MemTotal): a container with more memory
    than its host is refused by name, nothing stored; limits may add up to more than the
    host (unlimited containers report the host's memory each)."""
    now, gib = time.time(), 2**30
    fits = {**report("h1", [container("a1", memory_bytes=4 * gib),
                            container("b1", memory_bytes=4 * gib)], ts=now - 9),
            "memory_bytes": 4 * gib}  # fmt: skip
    assert _send(client, fits) == (202, "")
    before = store_rows(store_url)
    over = {**report("h1", [container("a1", memory_bytes=5 * gib)], ts=now - 5),
            "memory_bytes": 4 * gib}  # fmt: skip
    status, detail = _send(client, over)
    assert status == 422
    assert "container 'a1' has 5368709120 bytes of memory but the host has 4294967296" in detail
    old = {**fits, "schema_version": 2, "timestamp": report("h1", [], ts=now - 4)["timestamp"]}
    status, detail = _send(client, old)
    assert status == 422 and "memory_bytes needs schema_version 3" in detail
    assert store_rows(store_url) == before


def test_a_container_its_host_stops_listing_leaves_the_store(
    client: TestClient, clavisd: Clavisd
) -> None:
    now = time.time() - 20
    assert _send(client, report("h1", [container("a1"), container("b1")], ts=now))[0] == 202
    assert _send(client, report("h2", [container("c2")], ts=now))[0] == 202
    assert _containers(client) == {"a1": "h1", "b1": "h1", "c2": "h2"}
    # h1's next report lists only a1: b1 is gone; h2's container is untouched.
    assert _send(client, report("h1", [container("a1")], ts=now + 1))[0] == 202
    assert _containers(client) == {"a1": "h1", "c2": "h2"}
    snap = clavisd.snapshot(time.time())
    assert set(snap.current.assignment) == {"a1", "c2"}  # no ghost in the repack snapshot
    # A host reporting no container at all empties itself.
    assert _send(client, report("h1", [], ts=now + 2))[0] == 202
    assert _containers(client) == {"c2": "h2"}
    # The container moved to h3 while h1 was silent: h1's late report without it removes
    # nothing, and a late report of h1 still listing it does not pull it back.
    assert _send(client, report("h3", [container("b1")], ts=now + 10))[0] == 202
    assert _send(client, report("h1", [container("b1")], ts=now + 3))[0] == 202
    assert _containers(client)["b1"] == "h3"
    assert _send(client, report("h1", [], ts=now + 4))[0] == 202
    assert _containers(client) == {"b1": "h3", "c2": "h2"}


def test_expiry_within_one_batch_and_after_a_restart(clavisd: Clavisd) -> None:
    """The writer's own bookkeeping: several reports of one host in one batch, then a
    writer rebuilt from the store (a restarted clavisd) that still expires correctly."""
    ing = Ingestor(clavisd.store, clavisd.config.classify, 100, 0.0)
    now = time.time() - 30

    def acc(host: str, names: list[str], ts: float) -> Accepted:
        return Accepted.of(
            MonitorReport.model_validate(report(host, [container(n) for n in names], ts=ts))
        )

    assert ing.write_batch([acc("h1", ["a", "b"], now), acc("h1", ["a"], now + 1),
                            acc("h2", ["c"], now)]) == ["stored"] * 3  # fmt: skip
    assert {c.name: c.host for c in clavisd.store.containers()} == {"a": "h1", "c": "h2"}
    again = Ingestor(clavisd.store, clavisd.config.classify, 100, 0.0)
    assert again.write_batch([acc("h2", [], now + 2)]) == ["stored"]
    assert {c.name for c in clavisd.store.containers()} == {"a"}


def test_a_report_that_fails_on_its_own_is_refused_not_retried(tmp_path: Path) -> None:
    """A report the store cannot take however often it is sent is answered for good (422),
    so its agent does not hold back its host's later reports behind it for as long as the
    backlog window; a store that cannot be reached is a retry (503)."""
    (tmp_path / "db").mkdir()
    store = Store(f"sqlite:///{tmp_path / 'db' / 'clavis.db'}")
    cfg = load_config(write_setup(tmp_path)).classify
    ing = Ingestor(store, cfg, 100, 0.0)
    good = Accepted.of(MonitorReport.model_validate(report("h1", [container("a")])))
    broken = Accepted(good.ts, {k: v for k, v in good.doc.items() if k != "power"})
    assert ing.write_batch([good, broken]) == ["stored", "refused"]
    store.engine.dispose()
    (tmp_path / "db").rename(tmp_path / "gone")  # the store's file cannot be opened now
    later = Accepted.of(MonitorReport.model_validate(report("h1", [], ts=good.ts + 1)))
    assert ing.write_batch([later]) == ["retry"]


def test_late_reports_within_the_backlog_window_are_stored(client: TestClient) -> None:
    """A report older than max_report_age_s (120 s) but freshly signed is a spooled one:
    stored (issue 15, item 2). Beyond max_backlog_s it is refused."""
    now = time.time()
    for i in range(3):
        assert _send(client, report("h1", [container("a1")], ts=now - 3600 + i))[0] == 202
    status, detail = _send(client, report("h2", [], ts=now - 90_000))
    assert status == 422 and "stale report" in detail and "limit 86400 s" in detail
    view = login(client, "vic")
    (h1,) = [h for h in client.get("/api/v1/hosts", headers=view).json() if h["name"] == "h1"]
    assert h1["last_report"] == pytest.approx(now - 3600 + 2)


@pytest.mark.parametrize(
    ("field", "value"),
    [("cores", True), ("cores", "2"), ("cores", "2.0"), ("cores", 2.0),
     ("memory_bytes", "1024"), ("busy_cores", "1.5"), ("busy_cores", False)],
)  # fmt: skip
def test_types_are_strict(client: TestClient, clavisd: Clavisd, field: str, value: Any) -> None:
    """Issue 15, item 8: no coercion; "2.0" is refused at validation, not a 503 from the
    writer (which the monitor would retry until the report aged out)."""
    doc = report("h1", [container("a1", **{field: value})])
    status, detail = _send(client, doc)
    assert status == 422 and f"containers[0].{field}: Input should be a valid" in detail, detail
    assert clavisd.ingestor.stored == 0


def test_the_config_keeps_the_windows_consistent(tmp_path: Path) -> None:
    """The backlog window covers the freshness window, and the default covers a default
    monitor's spool (20,000 reports at one a second); valid_s is bounded (item 10)."""
    cfg = load_config(write_setup(tmp_path))
    assert cfg.ingest.max_backlog_s >= 20_000 * 1.0 >= cfg.ingest.max_report_age_s
    for extra, words in (
        ("[ingest]\nmax_report_age_s = 600\nmax_backlog_s = 300\n",
         "max_backlog_s (300) must not be below max_report_age_s (600)"),
        ("[advice_extra]\n", "advice_extra"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=re.escape(words)):
            load_config(write_setup(tmp_path, extra=extra))
    text = write_setup(tmp_path).read_text().replace("[advice]\n", "[advice]\nvalid_s = 7200\n")
    (tmp_path / "big.toml").write_text(text)
    with pytest.raises(ConfigError, match="valid_s: Input should be less than or equal to 3600"):
        load_config(tmp_path / "big.toml")
