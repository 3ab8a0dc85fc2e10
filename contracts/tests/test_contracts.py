"""Wire contracts: validation of each document, signing, and the published schemas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from clavis_contracts import SCHEMAS, AdviceFile, MigrationStep, MonitorReport, json_schemas
from clavis_contracts.signing import (
    NONCE,
    SIGNATURE,
    TIMESTAMP,
    NonceCache,
    SignatureError,
    read_secret,
    sign,
    verify,
)

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"0123456789abcdef0123456789abcdef"


def report(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "host": "h1",
        "timestamp": "2026-11-22T08:00:00Z",
        "interval_s": 1.0,
        "busy_cores": 3.5,
        "power": {"watts": 212.0, "source": "ipmi-dcmi"},
        "containers": [
            {
                "name": "n1",
                "job": "42",
                "cores": 4,
                "memory_bytes": 2**30,
                "busy_cores": 3.5,
                "intensity_mpki": 7.5,
                "intensity_source": "recorded",
                "traffic": [{"peer": "n2", "bytes_per_s": 1e6}],
            }
        ],
    }
    doc.update(over)
    return doc


def test_a_good_report_validates_and_round_trips() -> None:
    r = MonitorReport.model_validate(report())
    assert r.containers[0].traffic[0].peer == "n2"
    again = MonitorReport.model_validate_json(r.model_dump_json())
    assert again == r


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"timestamp": "2026-11-22T08:00:00"}, "time zone"),
        ({"power": {"watts": None, "source": "ipmi-dcmi"}}, "watts must be null exactly"),
        ({"busy_cores": -1}, "greater than or equal"),
        ({"extra": 1}, "Extra inputs"),
        ({"host": "bad host"}, "pattern"),
        ({"schema_version": 4}, "Input should be 1, 2 or 3"),
        ({"interval_s": float("nan")}, "finite"),
    ],
)
def test_bad_reports_are_refused_with_the_reason(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        MonitorReport.model_validate(report(**change))


def test_a_report_with_host_memory_fits_every_container_in_it() -> None:
    """Schema version 3: the host's memory, which each container's memory must fit (both
    ends validate: the monitor builds its report with this model, clavisd reads it)."""
    ok = MonitorReport.model_validate(report(memory_bytes=2**30))
    assert ok.schema_version == 3 and ok.memory_bytes == 2**30
    assert MonitorReport.model_validate(report()).memory_bytes is None  # not measured
    with pytest.raises(ValidationError, match="container 'n1' has 1073741824 bytes of memory "
                       "but the host has 1073741823"):  # fmt: skip
        MonitorReport.model_validate(report(memory_bytes=2**30 - 1))
    with pytest.raises(ValidationError, match="memory_bytes needs schema_version 3"):
        MonitorReport.model_validate(report(memory_bytes=2**31, schema_version=2))
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        MonitorReport.model_validate(report(memory_bytes=0))


def test_container_consistency() -> None:
    base = report()["containers"][0]
    for bad, words in [
        ({**base, "intensity_source": "unsupported"}, "intensity_mpki must be null"),
        ({**base, "traffic": [{"peer": "n1", "bytes_per_s": 1}]}, "itself"),
        ({**base, "traffic": [{"peer": "x", "bytes_per_s": 1}] * 2}, "peer twice"),
    ]:
        with pytest.raises(ValidationError, match=words):
            MonitorReport.model_validate(report(containers=[bad]))
    with pytest.raises(ValidationError, match="listed twice"):
        MonitorReport.model_validate(report(containers=[base, base]))


def test_step_and_advice_checks() -> None:
    step = {"step_id": "3:0", "plan": 3, "index": 0, "wave": 0, "container": "n1",
            "source": "h1", "target": "h2", "target_address": "h2:7781",
            "memory_bytes": 1, "cores": 2, "deadline_s": 60}  # fmt: skip
    assert MigrationStep.model_validate(step).target == "h2"
    with pytest.raises(ValidationError, match="same host"):
        MigrationStep.model_validate({**step, "target": "h1"})
    with pytest.raises(ValidationError, match="step_id must be"):
        MigrationStep.model_validate({**step, "step_id": "3:1"})
    node = {"node": "n1", "host": "h1", "rack": "r1", "contention": "ok", "node_class": "devil"}
    doc = {"generated": "2026-11-22T08:00:00+00:00", "valid_s": 120, "nodes": [node, node]}
    with pytest.raises(ValidationError, match="listed twice"):
        AdviceFile.model_validate(doc)


def test_advice_version_2_carries_applications_and_version_1_stays_valid() -> None:
    node = {"node": "n1", "host": "h1", "rack": "r1", "contention": "ok", "node_class": "devil"}
    app = {"app": "1000:stream.sh", "app_class": "devil", "jobs_seen": 3}
    base = {"generated": "2026-11-22T08:00:00+00:00", "valid_s": 120, "nodes": [node]}
    adv = AdviceFile.model_validate({**base, "apps": [app]})
    assert adv.schema_version == 2 and adv.apps[0].app == "1000:stream.sh"
    assert AdviceFile.model_validate_json(adv.model_dump_json()) == adv
    old = AdviceFile.model_validate({**base, "schema_version": 1})  # an older clavisd's file
    assert old.apps == []
    for doc, words in [
        ({**base, "schema_version": 1, "apps": [app]}, "apps needs schema_version 2"),
        ({**base, "apps": [app, app]}, "listed twice"),
        ({**base, "apps": [{**app, "app": "stream.sh"}]}, "not an application key"),
        ({**base, "apps": [{**app, "app": "01:x"}]}, "not an application key"),
        ({**base, "apps": [{**app, "app_class": "unknown"}]}, "'devil' or 'turtle'"),
        ({**base, "apps": [{**app, "jobs_seen": 0}]}, "greater than or equal to 1"),
        ({**base, "schema_version": 3}, "Input should be 1 or 2"),
    ]:
        with pytest.raises(ValidationError, match=words):
            AdviceFile.model_validate(doc)


def test_signed_request_verifies_once() -> None:
    body = b'{"x": 1}'
    h = sign(SECRET, "POST", "/api/v1/reports", body, now=1000.0)
    cache = NonceCache(window_s=30)
    verify(SECRET, "POST", "/api/v1/reports", body, h, now=1005.0, max_skew_s=30, nonces=cache)
    with pytest.raises(SignatureError, match="replayed"):
        verify(SECRET, "POST", "/api/v1/reports", body, h, now=1006.0, max_skew_s=30, nonces=cache)


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda h, b: ({k: v for k, v in h.items() if k != SIGNATURE}, b), "missing"),
        (lambda h, b: ({**h, SIGNATURE: "0" * 64}, b), "does not match"),
        (lambda h, b: (h, b + b" "), "does not match"),
        (lambda h, b: ({**h, NONCE: "xyz"}, b), "hex"),
        (lambda h, b: ({**h, TIMESTAMP: "-5"}, b), "unix seconds"),
    ],
)
def test_tampered_requests_are_refused(tamper: Any, words: str) -> None:
    body = b"{}"
    headers, body2 = tamper(sign(SECRET, "POST", "/p", body, now=1000.0), body)
    with pytest.raises(SignatureError, match=words):
        verify(SECRET, "POST", "/p", body2, headers, now=1e3, max_skew_s=30, nonces=NonceCache(30))


def _check(secret: bytes, path: str, h: dict[str, str], now: float, not_before: float = 0) -> None:
    verify(secret, "GET", path, b"", h, now=now, max_skew_s=30, nonces=NonceCache(30),
           not_before=not_before)  # fmt: skip


def test_skew_other_key_and_restart_are_refused() -> None:
    h = sign(SECRET, "GET", "/p", b"", now=1000.0)
    with pytest.raises(SignatureError, match="limit 30"):
        _check(SECRET, "/p", h, 1031.5)
    with pytest.raises(SignatureError, match="does not match"):
        _check(b"another-secret-of-16+", "/p", h, 1000.0)
    with pytest.raises(SignatureError, match="before this service started"):
        _check(SECRET, "/p", h, 1002.0, not_before=1001.0)
    with pytest.raises(SignatureError, match="does not match"):
        _check(SECRET, "/other", h, 1000.0)


def test_nonce_cache_is_bounded() -> None:
    cache = NonceCache(window_s=1, max_entries=10)
    for i in range(100):
        assert cache.add(f"{i:016x}", now=float(i) / 100)
    assert len(cache) <= 10
    cache.add("a" * 16, now=1000.0)
    assert len(cache) == 1  # everything older than the window was dropped


def test_secret_file_rules() -> None:
    assert read_secret(b"  " + SECRET + b"\n") == SECRET
    with pytest.raises(ValueError, match="at least 16"):
        read_secret(b"short\n")


def test_published_schemas_match_the_contracts() -> None:
    for kind, schema in json_schemas().items():
        published = json.loads((ROOT / "docs" / "schema" / f"{kind}.schema.json").read_text())
        assert published == schema, f"docs/schema/{kind}.schema.json is stale: run `make schemas`"
    assert set(SCHEMAS) == {
        "report",
        "migration-step",
        "step-status",
        "advice",
        "registration",
        "registration-reply",
    }


def test_contracts_import_without_solver_dependencies() -> None:
    code = (
        "import sys, clavis_contracts, clavis_contracts.signing;"
        "bad = [m for m in ('ortools', 'pymoo', 'scipy', 'numpy', 'clavis', 'fastapi',"
        " 'sqlalchemy') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_advice_validity_is_bounded_and_a_future_file_is_not_fresh() -> None:
    """Issue 15, item 10: a huge valid_s or a far-future ``generated`` kept a file fresh
    for ever."""
    node = {"node": "n1", "host": "h1", "rack": "r1", "contention": "ok", "node_class": "devil"}
    base = {"generated": "2026-11-22T08:00:00+00:00", "valid_s": 120, "nodes": [node]}
    with pytest.raises(ValidationError, match="less than or equal to 3600"):
        AdviceFile.model_validate({**base, "valid_s": 1e9})
    adv = AdviceFile.model_validate(base)
    t = adv.generated.timestamp()
    assert adv.fresh(t) and adv.fresh(t + 120) and not adv.fresh(t + 121)
    assert adv.fresh(t - 60) and not adv.fresh(t - 61)  # generated 61 s ahead of the reader
    ahead = AdviceFile.model_validate({**base, "generated": "2126-01-01T00:00:00+00:00"})
    assert not ahead.fresh(t)


def test_numbers_are_not_read_from_text_or_booleans() -> None:
    """Issue 15, item 8: strict types; a time is text, never a number."""
    for bad, where in [
        ({"busy_cores": "3.5"}, "busy_cores"),
        ({"interval_s": True}, "interval_s"),
        ({"timestamp": 1700000000}, "timestamp"),
    ]:
        with pytest.raises(ValidationError, match=where):
            MonitorReport.model_validate_json(json.dumps(report(**bad)))


@pytest.mark.parametrize(
    ("signed_at", "checked_at", "ok"),
    [
        (1000.9, 1001.8, True),  # 0.9 s late, but 1.8 s after the whole second "1000"
        (1000.0, 1001.0, True),  # 1.0 s late: at the limit
        (1000.0, 1002.1, False),  # 2.1 s late
        (1000.0, 1001.95, True),  # 1.95 s late, or 0.95 s if signed at 1000.99: not refused
        (1002.0, 1001.0, True),  # this clock 1.0 s behind: at the limit
        (1002.0, 1000.9, False),  # 1.1 s behind
    ],
)
def test_a_one_second_limit_allows_the_timestamps_rounding(
    signed_at: float, checked_at: float, ok: bool
) -> None:
    """Timestamps are whole seconds: the skew is measured from the nearest instant of the
    second they name, so a 1 s limit refuses only requests more than 1 s off."""
    h = sign(SECRET, "GET", "/p", b"", now=signed_at)

    def check() -> None:
        verify(SECRET, "GET", "/p", b"", h, now=checked_at, max_skew_s=1, nonces=NonceCache(1))

    if ok:
        check()
    else:
        with pytest.raises(SignatureError, match="limit 1 s"):
            check()
