"""vismon-ui's typed client is generated from clavisd's OpenAPI document: the committed
copy (vismon-ui/openapi.json) must be the one this clavisd serves, or the UI's types
describe another API (regenerate: vismon-ui/scripts/gen-api.sh). The TypeScript side
(src/api/schema.ts from openapi.json) is checked by vismon-ui/tests/api-current.test.ts."""

from __future__ import annotations

import json

from clavis.service.openapi_doc import render

from .helpers import ROOT


def test_committed_openapi_document_is_current() -> None:
    committed = ROOT / "vismon-ui" / "openapi.json"
    doc = json.loads(render())
    assert "/api/v1/front-runs/{run_id}/events" in doc["paths"]
    assert json.loads(committed.read_text()) == doc, (
        "vismon-ui/openapi.json is out of date: run vismon-ui/scripts/gen-api.sh"
    )
