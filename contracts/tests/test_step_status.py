"""Step status schema 2: what a move cost, refused in a schema 1 document."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from clavis_contracts import StepStatus

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)


def test_schema_2_carries_frozen_time_and_bytes() -> None:
    st = StepStatus(step_id="4:1", state="done", updated=NOW, seconds=2.5, frozen_s=1.3,
                    bytes_moved=4_000_000, precopy_rounds=0)  # fmt: skip
    assert st.schema_version == 2
    back = StepStatus.model_validate_json(st.model_dump_json())
    assert back == st and back.frozen_s == 1.3


def test_schema_1_documents_still_parse_and_refuse_the_new_fields() -> None:
    doc = {"schema_version": 1, "kind": "clavis.step-status", "step_id": "4:1",
           "state": "running", "updated": NOW.isoformat()}  # fmt: skip
    assert StepStatus.model_validate(doc).frozen_s is None
    with pytest.raises(ValidationError, match="bytes_moved need schema_version 2"):
        StepStatus.model_validate({**doc, "bytes_moved": 10})
    with pytest.raises(ValidationError):
        StepStatus.model_validate({**doc, "schema_version": 2, "frozen_s": -1})
