"""The SPANK plugin -> monitor registration messages (docs/monitor.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from clavis_contracts import DeregisterStep, RegisterStep, RegistrationReply, RegistrationRequest


def register(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": 1,
        "op": "register",
        "node": "n3",
        "job_id": 42,
        "step_id": 0,
        "pids": [81234],
        "cgroups": ["/sys/fs/cgroup/cpuset/slurm_n3/uid_0/job_42/step_0"],
        "uid": 1000,
        "app": "lbm",
        "class_hint": "auto",
    }
    doc.update(over)
    return doc


def test_the_documented_examples_parse() -> None:
    reg = RegistrationRequest.model_validate_json(json.dumps(register())).root
    assert isinstance(reg, RegisterStep)
    assert reg.pids == [81234]
    dereg = RegistrationRequest.model_validate_json(
        '{"schema_version":1,"op":"deregister","node":"n3","job_id":42,"step_id":0}'
    ).root
    assert isinstance(dereg, DeregisterStep)
    assert (dereg.node, dereg.job_id, dereg.step_id) == ("n3", 42, 0)


def test_minimal_register_takes_the_defaults() -> None:
    reg = RegistrationRequest.model_validate(
        {"op": "register", "node": "n1", "job_id": 1, "step_id": 4294967291, "pids": [7]}
    ).root
    assert isinstance(reg, RegisterStep)
    assert reg.cgroups == [] and reg.class_hint == "auto" and reg.app is None


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"op": "hello"}, "register"),
        ({"schema_version": 3}, "Input should be 1 or 2"),
        ({"job_id": 0}, "greater than or equal to 1"),
        ({"step_id": 2**32}, "less than or equal to 4294967295"),
        ({"pids": []}, "at least 1"),
        ({"pids": [5, 5]}, "pid is listed twice"),
        ({"pids": [0]}, "greater than or equal to 1"),
        ({"node": "../etc"}, "pattern"),
        ({"cgroups": ["/tmp/x"]}, "must start with /sys/fs/cgroup/"),
        ({"cgroups": ["/sys/fs/cgroup/cpu/../../etc"]}, "normalised"),
        ({"class_hint": "dragon"}, "auto"),
        ({"extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_bad_requests_name_what_is_wrong(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as err:
        RegistrationRequest.model_validate(register(**over))
    assert needle in str(err.value)


def test_deregister_refuses_register_fields() -> None:
    with pytest.raises(ValidationError, match="Extra inputs"):
        RegistrationRequest.model_validate(
            {"op": "deregister", "node": "n1", "job_id": 1, "step_id": 0, "pids": [3]}
        )


def test_reply_starts_with_ok_for_c_readers() -> None:
    assert RegistrationReply(ok=True).model_dump_json() == (
        '{"ok":true,"error":null,"schema_version":2}'
    )
    assert RegistrationReply(ok=False, error="x").model_dump_json().startswith('{"ok":false')
