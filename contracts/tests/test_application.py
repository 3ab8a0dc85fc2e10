"""Report and registration v2: the application key, the class hint, the emulated source."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from clavis_contracts import MonitorReport, RegistrationRequest
from clavis_contracts.application import MAX_NAME_BYTES, app_key, is_app_key
from clavis_contracts.registration import RegisterStep

CONTAINER: dict[str, Any] = {
    "name": "n1",
    "job": "42",
    "cores": 1,
    "memory_bytes": 2**30,
    "busy_cores": 1.0,
    "intensity_mpki": 30.0,
    "intensity_source": "emulated",
    "app": "1000:stream.sh",
    "class_hint": "devil",
}


def report(version: int | None = None, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "host": "h1",
        "timestamp": "2026-11-23T08:00:00Z",
        "interval_s": 1.0,
        "busy_cores": 1.0,
        "power": {"watts": 140.0, "source": "ipmi-dcmi"},
        "containers": [{**CONTAINER, **over}],
    }
    if version is not None:
        doc["schema_version"] = version
    return doc


def test_the_key_is_uid_colon_job_name() -> None:
    assert app_key(1000, "stream.sh") == "1000:stream.sh"
    assert app_key(0, "a b:c/é") == "0:a b:c/é"  # any bytes of the name, unchanged
    assert app_key(None, "x") is None and app_key(7, None) is None and app_key(7, "") is None
    assert app_key(7, "é" * (MAX_NAME_BYTES // 2)) is not None
    assert app_key(7, "é" * (MAX_NAME_BYTES // 2) + "x") is None  # bytes, not characters
    assert app_key(2**32, "x") is None


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("1000:lbm", True),
        ("0:x:y", True),
        ("lbm", False),
        (":lbm", False),
        ("1000:", False),
        ("01000:lbm", False),
        ("+1:lbm", False),
        ("٣:lbm", False),  # a non-ASCII digit
        ("4294967296:x", False),
        ("1:" + "x" * (MAX_NAME_BYTES + 1), False),
    ],
)
def test_is_app_key(text: str, ok: bool) -> None:
    assert is_app_key(text) is ok


def test_v2_report_carries_hint_key_and_emulated_source() -> None:
    r = MonitorReport.model_validate({**report(), "schema_version": 2})
    assert r.schema_version == 2
    c = r.containers[0]
    assert (c.app, c.class_hint, c.intensity_source) == ("1000:stream.sh", "devil", "emulated")
    assert MonitorReport.model_validate_json(r.model_dump_json()) == r


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        (report(app="lbm"), "not an application key"),
        (report(class_hint="auto"), "'devil' or 'turtle'"),
        (report(1), "need schema_version 2"),
        (report(1, intensity_source="perf"), "need schema_version 2"),
        (report(1, class_hint=None), "need schema_version 2"),  # emulated
    ],
)
def test_v2_content_is_checked(doc: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        MonitorReport.model_validate(doc)


def test_v1_reports_still_validate() -> None:
    old = report(1, app="lbm", class_hint=None, intensity_source="recorded")
    assert MonitorReport.model_validate(old).containers[0].app == "lbm"


def register(**over: Any) -> dict[str, Any]:
    doc = {"op": "register", "node": "n1", "job_id": 5, "step_id": 0, "pids": [9], "uid": 1000}
    return {**doc, **over}


def test_registration_v2_job_name_makes_the_key() -> None:
    step = RegistrationRequest.model_validate(register(job_name="stream.sh", app="slurm_script"))
    assert isinstance(step.root, RegisterStep) and step.root.schema_version == 2
    assert step.root.application() == "1000:stream.sh"
    fallback = RegistrationRequest.model_validate(register(app="lbm")).root
    assert isinstance(fallback, RegisterStep) and fallback.application() == "1000:lbm"
    nouid = RegistrationRequest.model_validate(register(uid=None, job_name="x")).root
    assert isinstance(nouid, RegisterStep) and nouid.application() is None


def test_registration_v1_has_no_job_name() -> None:
    with pytest.raises(ValidationError, match="job_name needs schema_version 2"):
        RegistrationRequest.model_validate(register(schema_version=1, job_name="x"))
    v1 = RegistrationRequest.model_validate(register(schema_version=1, app="lbm")).root
    assert isinstance(v1, RegisterStep) and v1.application() == "1000:lbm"
